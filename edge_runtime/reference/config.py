"""`docs/reference/config.md`: every key of the daemon's config file, from the schema's own models.

One section per mapping, each a table of its keys with the full dotted path, type, default, allowed
values and description; a union chosen by `type:` (the pipeline's source) gets one section per member.
A mapping met again at the same path with the same keys (a camera's `reconnect` under each kind of
camera) is listed once, and linked to from every place it appears.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edge_runtime.config.schema import DaemonConfig
from edge_runtime.reference.fields import (
    COMPUTED,
    NAMED_ENTRY,
    NO_DEFAULT,
    SECTION,
    Key,
    Variant,
    keys_of,
    slug,
    yaml_value,
)
from edge_runtime.reference.markdown import cell, code, generated_notice, sentence, table

__all__ = ["config_page"]

INTRO = """\
The daemon reads one YAML file, `/etc/edge-runtime/config.yaml` unless `edge-runtime run --config` names
another. `edge-runtime config example` prints a file with every key below at its default, and
`edge-runtime check-config FILE` checks one without running it.

- A key is written as its dotted path: `mqtt.spool.max_bytes` is `max_bytes` in `spool` in `mqtt`;
  `pipelines[].name` is `name` in each item of the list `pipelines`, and
  `pipelines[].track.filters.<name>.threshold` is `threshold` in each entry of `filters`, under the
  entry's name.
- Unknown or misspelt keys are errors, not ignored.
- Relative paths are relative to the config file's directory.
- Any value may be `${NAME}` (the environment variable NAME; `${NAME:-default}` when it may be unset) or
  `!credential NAME` (the file NAME in systemd's `$CREDENTIALS_DIRECTORY`): secrets never belong in the file.
- A section whose default is `null` is off until it is written; `motion: {}` turns one on with its defaults."""


def config_page() -> str:
    page = _Page()
    page.section("Top level", "top-level", "The keys at the top of the file.", keys_of(DaemonConfig))
    return "\n".join([generated_notice(), "", "# Config file reference", "", INTRO, *page.lines]) + "\n"


@dataclass
class _Page:
    lines: list[str] = field(default_factory=list)
    anchors: dict[str, tuple[Key, ...]] = field(default_factory=dict)  # sections written, by anchor

    def section(self, title: str, anchor: str, intro: str, keys: tuple[Key, ...]) -> None:
        self.anchors[anchor] = keys
        rows = [(code(key.path), self._kind(key), _default(key), _allowed(key), cell(key.description)) for key in keys]
        self.lines += ["", f'<a id="{anchor}"></a>', "", f"## {title}", "", intro, ""]
        self.lines += table(("key", "type", "default", "allowed", "description"), rows)
        for key in keys:
            if key.keys:
                self._subsection(key)
            for variant in key.variants:
                self._variant(key, variant)

    def _subsection(self, key: Key) -> None:
        anchor = self._anchor_of(key)
        if anchor not in self.anchors:
            path = f"{key.path}[]" if key.repeated else f"{key.path}.{NAMED_ENTRY}" if key.named else key.path
            intro = sentence(key.description)
            if key.named:
                intro += " Each entry, under a name of its own, has these keys."
            if key.repeated:
                intro += (
                    " An item given as a mapping has these keys."
                    if " or " in key.kind
                    else " Each item has these keys."
                )
            self.section(f"`{path}`", anchor, intro, key.keys)

    def _variant(self, key: Key, variant: Variant) -> None:
        title = f"`{key.path}` with `{variant.discriminator}: {variant.tag}`"
        self.section(title, slug(f"{key.path} {variant.tag}"), sentence(variant.description), variant.keys)

    def _anchor_of(self, key: Key) -> str:
        """The section's anchor; a mapping with other keys at the same path (none so far) gets its own."""
        anchor = slug(key.path)
        number = 1
        while anchor in self.anchors and self.anchors[anchor] != key.keys:
            number += 1
            anchor = f"{slug(key.path)}-{number}"
        return anchor

    def _kind(self, key: Key) -> str:
        kind = key.kind + (" or null" if key.nullable else "")
        if key.keys:
            return f"{kind}: [keys]({'#' + self._anchor_of(key)})"
        if key.variants:
            discriminator = key.variants[0].discriminator
            links = ", ".join(f"[`{v.tag}`](#{slug(f'{key.path} {v.tag}')})" for v in key.variants)
            return f"{kind}, by `{discriminator}`: {links}"
        return kind


def _default(key: Key) -> str:
    if key.default is NO_DEFAULT:
        return "**required**"
    if key.default is COMPUTED:
        return "set when loaded"
    if key.default is SECTION:
        return "its keys' defaults"
    return code(yaml_value(key.default))


def _allowed(key: Key) -> str:
    allowed = [code(yaml_value(choice)) for choice in key.choices]
    limits = [code(limit) if "=" in limit or limit[0] in "<>" else cell(limit) for limit in key.limits]
    return ", ".join(allowed + limits)
