"""The config reference: every key described, every key it lists taken by the schema, and nothing left out.

The schema is read back through pydantic's own JSON Schema of `DaemonConfig`, a way into the models that
shares nothing with the walk the page is written from.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.config.schema import DaemonConfig
from edge_runtime.reference.fields import NO_EXAMPLE, Key, keys_of, walk

REPO = Path(__file__).resolve().parents[2]
CONFIG_PAGE = REPO / "docs" / "reference" / "config.md"
ROW = re.compile(
    r"^\| `(?P<path>[^`]+)` \| (?P<type>[^|]*) \| (?P<default>[^|]*) \| (?P<allowed>.*?) \| (?P<what>.*) \|$"
)


def rows_by_section() -> list[tuple[str | None, dict[str, str]]]:
    """Each key row of the page, with the source `type` its section is about (None outside such a section)."""
    tag = None
    found = []
    for line in CONFIG_PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            heading = re.search(r"`type: (\w+)`", line)
            tag = heading.group(1) if heading else (tag if "pipelines[].source." in line else None)
        elif match := ROW.match(line):
            found.append((tag, match.groupdict()))
    return found


def test_every_key_has_a_description_a_user_can_act_on() -> None:
    undescribed = [key.path for key in walk(keys_of(DaemonConfig)) if len(key.description.split()) < 3]
    assert undescribed == [], "describe these keys in their Field(description=...): " + ", ".join(undescribed)


def test_every_required_value_has_an_example_to_write_in_its_place() -> None:
    """`config example` writes a placeholder for each required key that is not a section of its own."""
    wanting = [key.path for key in walk(keys_of(DaemonConfig)) if _needs_placeholder(key)]
    assert wanting == [], "give these keys Field(examples=[...]): " + ", ".join(wanting)


def _needs_placeholder(key: Key) -> bool:
    inline_key = key.path.endswith("keys[].pem")  # in a list that is empty by default: never written
    return key.required and not key.is_section and key.placeholder is NO_EXAMPLE and not inline_key


def test_every_key_on_the_page_is_taken_by_the_schema() -> None:
    schema = DaemonConfig.model_json_schema()
    rows = rows_by_section()
    assert len(rows) > 150
    refused = [(tag, row["path"]) for tag, row in rows if not _accepts(schema, row["path"], tag)]
    assert refused == []


def test_every_key_of_the_schema_is_on_the_page() -> None:
    schema = DaemonConfig.model_json_schema()
    listed = {row["path"] for _, row in rows_by_section()}
    missing = sorted({path for path in _schema_paths(schema, schema, "") if path not in listed})
    assert missing == []


def test_each_kind_of_source_lists_its_own_keys() -> None:
    """A kind's section lists the keys it has, and no key only another kind has (shared sections aside). A pipeline's
    own camera has the keys of the camera named in `sources:` and those that say which frames the pipeline takes."""
    schema = DaemonConfig.model_json_schema()
    for prefix, pick in (("pipelines[].source.", max), ("sources.<name>.", min)):
        direct: dict[str, set[str]] = {}
        for tag, row in rows_by_section():
            if tag is not None and row["path"].startswith(prefix) and row["path"].count(".") == 2:
                direct.setdefault(tag, set()).add(row["path"].removeprefix(prefix))
        members = schema["$defs"]
        for tag, names in direct.items():
            tagged = [m for m in members.values() if m.get("properties", {}).get("type", {}).get("const") == tag]
            member = pick(tagged, key=lambda m: len(m["properties"]))
            assert names == set(member["properties"]), tag
        assert direct, prefix


@pytest.mark.parametrize(
    ("tag", "path", "kind", "default"),
    [
        ("stream", "pipelines[].source.url", "text", "**required**"),
        ("stream", "pipelines[].source.transport", "text", "`tcp`"),
        ("stream", "pipelines[].source.motion", "mapping or null: [keys](#pipelines-source-motion)", "`null`"),
        (
            "stream",
            "pipelines[].source.reconnect",
            "mapping: [keys](#pipelines-source-reconnect)",
            "its keys' defaults",
        ),
        ("v4l2", "pipelines[].source.reconnect.initial_s", "number", "`1.0`"),
        ("v4l2", "pipelines[].source.reconnect.max_s", "number", "`30.0`"),
        ("v4l2", "pipelines[].source.reconnect.jitter", "number", "`0.2`"),
        ("v4l2", "pipelines[].source.motion.threshold", "integer", "`25`"),
        ("v4l2", "pipelines[].source.motion.keepalive_s", "number or null", "`10.0`"),
        ("file", "pipelines[].source.policy", "text", "`every`"),
        (None, "mqtt.spool.max_bytes", "integer", "`268435456`"),
        (None, "pipelines[].publish.qos", "integer", "`1`"),
        (
            None,
            "pipelines[].track.filters",
            "mapping of text to mappings: [keys](#pipelines-track-filters)",
            "`{default: {}}`",
        ),
        (None, "pipelines[].track.filters.<name>.threshold", "number", "`0.7`"),
        (None, "device_id", "text", "**required**"),
        (None, "state_dir", "path", "set when loaded"),
    ],
)
def test_known_keys_are_listed_with_type_and_default(tag: str | None, path: str, kind: str, default: str) -> None:
    [row] = [row for row_tag, row in rows_by_section() if row_tag == tag and row["path"] == path]
    assert (row["type"], row["default"]) == (kind, default)
    assert row["what"]


def test_limits_and_choices_are_listed() -> None:
    rows = {(tag, row["path"]): row for tag, row in rows_by_section()}
    assert (
        rows[("stream", "pipelines[].source.url")]["allowed"]
        == r"matches `^(rtsp\|rtsps\|http\|https\|rtmp\|udp\|tcp)://`"
    )
    assert rows[(None, "pipelines[].publish.qos")]["allowed"] == "`0`, `1`, `2`"
    assert rows[("v4l2", "pipelines[].source.reconnect.jitter")]["allowed"] == "`>= 0`, `<= 1`"
    assert rows[(None, "log_level")]["allowed"] == "`debug`, `info`, `warning`, `error`"


def test_a_union_by_type_has_one_section_per_member() -> None:
    headings = [line for line in CONFIG_PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("## ")]
    sources = [h for h in headings if h.startswith("## `pipelines[].source` with")]
    assert re.findall(r"type: (\w+)", "\n".join(sources)) == [
        "v4l2",
        "stream",
        "file",
        "shared",
        "folder",
        "mqtt",
        "serial",
        "replay",
    ]


def _accepts(schema: dict[str, Any], path: str, tag: str | None) -> bool:
    node: dict[str, Any] | None = schema
    for part in path.split("."):
        name, items = (part[:-2], True) if part.endswith("[]") else (part, False)
        node = _entry(schema, node) if name == "<name>" else _property(schema, node, name, tag)
        if node is not None and items:
            node = _items(schema, node)
        if node is None:
            return False
    return True


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> list[dict[str, Any]]:
    """The object schemas `node` may be: through $ref, anyOf and oneOf."""
    if "$ref" in node:
        return _resolve(schema, schema["$defs"][node["$ref"].split("/")[-1]])
    if "anyOf" in node or "oneOf" in node:
        return [found for member in node.get("anyOf", node.get("oneOf")) for found in _resolve(schema, member)]
    return [node]


def _property(schema: dict[str, Any], node: dict[str, Any] | None, name: str, tag: str | None) -> dict[str, Any] | None:
    if node is None:
        return None
    candidates = [c for c in _resolve(schema, node) if name in c.get("properties", {})]
    tagged = [c for c in candidates if c.get("properties", {}).get("type", {}).get("const") == tag]
    chosen = tagged or candidates
    return chosen[0]["properties"][name] if chosen else None


def _entry(schema: dict[str, Any], node: dict[str, Any] | None) -> dict[str, Any] | None:
    """The schema of each entry of a mapping of names to sections."""
    for candidate in _resolve(schema, node) if node is not None else []:
        if isinstance(candidate.get("additionalProperties"), dict):
            return dict(candidate["additionalProperties"])
    return None


def _items(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any] | None:
    for candidate in _resolve(schema, node):
        if "items" in candidate:
            return dict(candidate["items"])
    return None


def _schema_paths(schema: dict[str, Any], node: dict[str, Any], prefix: str) -> list[str]:
    """Every key the JSON Schema has, as a dotted path with `[]` for the items of a list and `<name>` for the
    entries of a mapping of names to sections."""
    found: list[str] = []
    for candidate in _resolve(schema, node):
        for name, child in candidate.get("properties", {}).items():
            found += [f"{prefix}{name}", *_schema_paths(schema, child, f"{prefix}{name}.")]
        if "items" in candidate:
            found += _schema_paths(schema, candidate["items"], prefix[:-1] + "[].")
        if isinstance(candidate.get("additionalProperties"), dict):
            found += _schema_paths(schema, candidate["additionalProperties"], f"{prefix}<name>.")
    return found
