"""`edge-runtime config example`: a config file with every key at its default, each described in a comment.

Written from the same walk of the schema as `docs/reference/config.md`, so it has every key the daemon
takes and nothing else. What is active loads as it is, once the user's values replace the placeholders
of required keys (`Field(examples=...)`): only a model path cannot be made up, and `check-config` says
so. Optional sections (default null, no entry in a mapping of names, or an empty list of them below the
top level, as a pipeline's cascade stages) and the other kinds of source are written commented out, one
`# ` deep, so that taking one in means removing that much from each of its lines.
"""

from __future__ import annotations

import textwrap

from edge_runtime.config.schema import DaemonConfig
from edge_runtime.reference.fields import COMPUTED, NO_DEFAULT, NO_EXAMPLE, SECTION, Key, keys_of, yaml_value

__all__ = ["config_example"]

WIDTH = 110
HEADER = """\
# edge-runtime config: every key at its default, with what it does.
# Printed by `edge-runtime config example` from the schema that `run` and `check-config` validate;
# docs/reference/config.md lists the same keys.
#
# Keys marked "required" hold a placeholder: put in your own values, then check the file with
#     edge-runtime check-config FILE
# Sections commented out are optional: remove one "# " from each of their lines to use one.
# Relative paths are relative to this file's directory. Secrets go in as ${NAME} (an environment
# variable) or !credential NAME (a systemd credential), never as text in this file."""


def config_example() -> str:
    return "\n".join([HEADER, "", *_mapping(keys_of(DaemonConfig), 0), ""])


def _mapping(keys: tuple[Key, ...], indent: int) -> list[str]:
    lines: list[str] = []
    for key in keys:
        lines += _key(key, indent)
    return lines


def _key(key: Key, indent: int) -> list[str]:
    pad = " " * indent
    lines = _comment(_explanation(key), indent)
    if key.variants and key.named:  # one entry, of the first kind, the others below it
        entry = [f"{pad}{key.name}:", *_variants(key, indent + 2, _entry_name(key))]
        return lines + (_commented(entry, indent) if key.default == {} else entry)
    if key.variants:
        return lines + _variants(key, indent)
    if key.keys and key.repeated and key.kind == "list of mappings":
        items = [f"{pad}{key.name}:", *_item(key.keys, indent + 2)]
        return lines + (_commented(items, indent) if indent and key.default == [] else items)
    if key.keys and key.named:
        entry = [f"{pad}{key.name}:", f"{pad}  {_entry_name(key)}:", *_mapping(key.keys, indent + 4)]
        return lines + (_commented(entry, indent) if key.default == {} else entry)
    if key.keys and key.default in (SECTION, NO_DEFAULT):
        return [*lines, f"{pad}{key.name}:", *_mapping(key.keys, indent + 2)]
    if key.keys and key.default is None:
        return lines + _commented([f"{pad}{key.name}:", *_mapping(key.keys, indent + 2)], indent)
    if key.default is COMPUTED:
        return lines + _commented([f"{pad}{key.name}:"], indent)
    value = _placeholder(key) if key.default is NO_DEFAULT else key.default
    return [*lines, f"{pad}{key.name}: {yaml_value(value)}"]


def _variants(key: Key, indent: int, name: str | None = None) -> list[str]:
    """The first member active, the others commented out below it without the keys they share with it; under
    `name`, an entry's, where the members are the entries of a mapping of names."""
    pad = " " * indent
    name = name or key.name
    active, *others = key.variants
    lines = [f"{pad}{name}:", *_mapping(active.keys, indent + 2)]
    tags = ", ".join(variant.tag for variant in others)
    shared = [k for k in active.keys if k.name != active.discriminator and any(k in v.keys for v in others)]
    sharing = ", ".join(v.tag for v in others if any(k in v.keys for k in shared))
    text = f"in place of the {name} above, any one of: {tags}."
    if shared:
        text += f" {sharing} also take {', '.join(k.name for k in shared)}, written as above."
    lines += _comment(text, indent)
    for variant in others:
        own = tuple(k for k in variant.keys if k not in active.keys)
        lines += _commented([f"{pad}{name}:", *_mapping(own, indent + 2)], indent)
    return lines


def _item(keys: tuple[Key, ...], indent: int) -> list[str]:
    """One item of a list of mappings: `- ` before its first key, the comments above it moved out with it."""
    lines = _mapping(keys, indent + 2)
    first = next(index for index, line in enumerate(lines) if not line.lstrip().startswith("#"))
    moved = [line[2:] for line in lines[:first]]
    return [*moved, f"{' ' * indent}- {lines[first].lstrip()}", *lines[first + 1 :]]


def _explanation(key: Key) -> str:
    notes = []
    if key.default is NO_DEFAULT and not key.is_section:
        notes.append("required")
    if key.default is None and key.is_section:
        notes.append("optional, off by default")
    if key.choices and not (key.default is NO_DEFAULT and len(key.choices) == 1):
        notes.append("one of " + ", ".join(yaml_value(choice) for choice in key.choices))
    notes += key.limits
    return key.description + (f" ({'; '.join(notes)})" if notes else "")


def _entry_name(key: Key) -> str:
    """The name to write one entry of a mapping of names to sections under: its default's first entry's."""
    for names in (key.default, key.example):
        if isinstance(names, dict) and names:
            return str(next(iter(names)))
    raise ValueError(f"{key.path} has no default entry to show; give its Field an examples=[{{name: ...}}]")


def _placeholder(key: Key) -> object:
    value = key.placeholder
    if value is NO_EXAMPLE:
        raise ValueError(f"{key.path} is required, but its Field gives no examples= to write in its place")
    return value


def _comment(text: str, indent: int) -> list[str]:
    pad = " " * indent + "# "
    return textwrap.wrap(text, WIDTH, initial_indent=pad, subsequent_indent=pad, break_on_hyphens=False)


def _commented(lines: list[str], indent: int) -> list[str]:
    return [f"{line[:indent]}# {line[indent:]}" for line in lines]
