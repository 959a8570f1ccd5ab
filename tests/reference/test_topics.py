"""The topics reference: every topic `Topics` builds is on it, with the result's JSON Schema."""

from __future__ import annotations

import inspect
import json
from importlib import resources

from edge_runtime.mqtt.topics import Topics
from edge_runtime.reference.topics import TOPICS, TOPICS_OF_THE_BOX, topics_page

NOT_TOPICS = {"prefix", "device_id", "device", "pipeline"}  # what topics are built from, not topics


def built_topics() -> dict[str, str]:
    """Each topic `Topics` builds, by the member that builds it, with `<...>` for what it is given."""
    found = {}
    for name, member in inspect.getmembers(Topics):
        if name.startswith("_") or name in NOT_TOPICS:
            continue
        if isinstance(member, property):
            found[name] = getattr(TOPICS_OF_THE_BOX, name)
        else:
            parameters = list(inspect.signature(member).parameters)[1:]
            found[name] = getattr(TOPICS_OF_THE_BOX, name)(*(f"<{parameter}>" for parameter in parameters))
    return found


def test_every_topic_the_box_builds_is_documented() -> None:
    documented = {entry.name: entry.topic for entry in TOPICS}
    built = built_topics()
    assert len(built) >= 10
    assert {name: documented.get(name) for name in built} == built


def test_every_topic_is_on_the_page_with_what_the_daemon_does() -> None:
    page = topics_page()
    for entry in TOPICS:
        assert f"## {entry.name}\n" in page
        assert entry.direction.startswith(("publishes", "subscribes"))
    assert "| `<prefix>/<device_id>/<pipeline>/result` | publishes |" in page
    assert "| `<prefix>/<device_id>/command` | subscribes |" in page


def test_the_result_topic_carries_its_json_schema() -> None:
    page = topics_page()
    text = resources.files("edge_runtime.schemas").joinpath("result.schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    [result] = [entry for entry in TOPICS if entry.name == "result"]
    assert result.schema == "result.schema.json"
    assert text.rstrip("\n") in page
    for field in schema["properties"]:
        assert f"| `{field}` |" in page
    assert "| `id` | string | yes | unique per result; the deduplication key |" in page


def test_the_tracking_topics_carry_their_schemas_with_the_event_objects_fields() -> None:
    page = topics_page()
    schemas = {entry.name: entry.schema for entry in TOPICS if entry.schema}
    assert schemas == {
        "result": "result.schema.json",
        "events": "event.schema.json",
        "line_crossing": "crossing.schema.json",
        "line_totals": "totals.schema.json",
        "object_update": "object_update.schema.json",
    }
    event = json.loads(resources.files("edge_runtime.schemas").joinpath("event.schema.json").read_text("utf-8"))
    for field in event["$defs"]["object"]["properties"]:
        assert f"| `{field}` |" in page
    assert "| `box` | array | yes | where the object is" in page  # a part of the schema, named by its type
    assert "| `<prefix>/<device_id>/<pipeline>/zone/<zone>/occupied` | publishes | 1 | yes |" in page
