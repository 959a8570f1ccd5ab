"""`docs/reference/topics.md`: every MQTT topic the daemon publishes to or subscribes to.

Each topic's name comes from `mqtt.topics.Topics`, the one place the daemon builds it, and each member of
`Topics` must appear here (the tests check it), so a new topic cannot stay undocumented. The payloads'
JSON Schemas are the files in `edge_runtime/schemas` that the tests validate messages against.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any

from edge_runtime.mqtt.topics import Topics, shared
from edge_runtime.reference.markdown import cell, code, generated_notice, sentence, table
from edge_runtime.rollout.state import RolloutRecord, Stage

__all__ = ["TOPICS", "TOPICS_OF_THE_BOX", "TopicEntry", "topics_page"]

TOPICS_OF_THE_BOX = Topics("<prefix>", "<device_id>")


@dataclass(frozen=True)
class TopicEntry:
    name: str  # the Topics member that builds it, or the config key that names it
    topic: str
    direction: str  # what the daemon does: "publishes", "subscribes"
    qos: str
    retained: str
    when: str
    payload: str
    schema: str | None = None  # a file in edge_runtime/schemas


_t = TOPICS_OF_THE_BOX  # short, for the table below
TOPICS = (
    TopicEntry(
        "status",
        _t.status,
        "publishes",
        "1",
        "yes",
        "always",
        "`online` when the box connects; `offline` when it stops cleanly, and from the broker as the box's "
        "Last Will when its connection is lost",
    ),
    TopicEntry(
        "stats",
        _t.stats,
        "publishes",
        "0",
        "no",
        "every `stats.interval_s` seconds",
        "a JSON object: `device_id`, `uptime_s`, `pipelines` (per pipeline: fps in and out, dropped frames, "
        "stage latency percentiles, the backend in use, the source's state), `mqtt` (spool depth, drops, "
        "reconnects, the broker node), `rollout` and, when serving, `serving`",
    ),
    TopicEntry(
        "result",
        _t.result("<pipeline>"),
        "publishes",
        "`pipelines[].publish.qos` (default 1); at 1 and 2 through the spool",
        "`pipelines[].publish.retain` (default no)",
        "a frame or window with a result, as `pipelines[].publish` selects",
        "one JSON message per result; delivered at least once, so drop repeats by `id`",
        "result.schema.json",
    ),
    TopicEntry(
        "model",
        _t.model("<pipeline>"),
        "publishes",
        "1",
        "yes",
        "when a pipeline starts, after every model swap (a rollout or a roll-back), and after every reconnect; "
        "emptied when a reload removes the pipeline",
        "a JSON object naming the model the pipeline runs: `name`, `version`, `variant`, the first file's "
        "`sha256` and every file's digest in `files`; results name the model by name, version and variant",
    ),
    TopicEntry(
        "snapshot",
        _t.snapshot("<pipeline>"),
        "publishes",
        "0",
        "yes",
        "`pipelines[].publish.snapshot.enabled`, at most `max_rate_hz` per second",
        "JPEG of the frame with the detections drawn",
    ),
    TopicEntry(
        "mask",
        _t.mask("<pipeline>"),
        "publishes",
        "0",
        "yes",
        "a segmentation decoder that makes a mask",
        "PNG of the class mask",
    ),
    TopicEntry(
        "events",
        _t.events("<pipeline>"),
        "publishes",
        "1, through the spool",
        "no",
        "`pipelines[].events` with tracking: when a tracked object is confirmed (and, with `required_zones`, "
        "has entered one), when its zones change, it stops or moves again, a better picture of it exists "
        "(at most every 5 s), at least every `heartbeat_s`, and once when it leaves",
        'Frigate\'s event message, `{"type": "new" | "update" | "end", "before": ..., "after": ...}`: `after` '
        "is the object now, `before` as the previous message described it (null for `new`)",
        "event.schema.json",
    ),
    TopicEntry(
        "event_snapshot",
        _t.event_snapshot("<pipeline>", "<event_id>"),
        "publishes",
        "0",
        "no",
        "`pipelines[].events.snapshot.enabled`: with the event's `new`, when a better picture exists (at most "
        "every 5 s), and with its `end` if the best picture was not yet sent; never spooled, so pictures taken "
        "while the broker is away are lost (the events are not)",
        "JPEG of the object's best frame so far (cropped, boxed and scaled as `events.snapshot` says); the "
        "event message's `snapshot` field says which frame and box it shows",
    ),
    TopicEntry(
        "object_update",
        _t.object_update("<pipeline>", "<object_id>"),
        "publishes",
        "1, through the spool",
        "no",
        "`pipelines[].cascade` with tracking: when a stage with `attach: sub_label` gives a tracked object a "
        "sub-label by consensus over its attempts, or replaces it with another (Frigate's tracked_object_update)",
        '`{"type": "sub_label", "id", "label", "stage", "sub_label", "score", ...}`; the '
        "object's events carry the sub-label too, and its next result messages",
        "object_update.schema.json",
    ),
    TopicEntry(
        "label_snapshot",
        _t.label_snapshot("<pipeline>", "<label>"),
        "publishes",
        "1",
        "yes",
        "`pipelines[].events.snapshot.enabled`: when an event of that label has a better picture than the one "
        "shown, or any new picture once the one shown is `label_refresh_s` old; the latest again after every "
        "reconnect",
        "JPEG of the latest best object of the label, for a dashboard's picture (Home Assistant's MQTT image)",
    ),
    TopicEntry(
        "count",
        _t.count("<pipeline>", "<label>"),
        "publishes",
        "1",
        "yes",
        "with `pipelines[].zones`, `lines` or `events` (and tracking): when it changes, at start-up and after "
        "every reconnect (0 before any object); 0 when the pipeline stops; emptied when a reload removes the "
        "pipeline",
        "the number of confirmed objects of the label present, as text; `<label>` `all` counts every label",
    ),
    TopicEntry(
        "zone_count",
        _t.zone_count("<pipeline>", "<zone>", "<label>"),
        "publishes",
        "1",
        "yes",
        "with `pipelines[].zones`: as `count`",
        "the number of objects of the label in the zone, as text; `all` for every label the zone counts",
    ),
    TopicEntry(
        "zone_occupied",
        _t.zone_occupied("<pipeline>", "<zone>"),
        "publishes",
        "1",
        "yes",
        "with `pipelines[].zones`: as `count`",
        "`ON` while any object the zone counts is in it, else `OFF`",
    ),
    TopicEntry(
        "line_crossing",
        _t.line_crossing("<pipeline>", "<line>"),
        "publishes",
        "1, through the spool",
        "no",
        "with `pipelines[].lines`: each crossing, once the object has held its new side",
        "one JSON message per crossing",
        "crossing.schema.json",
    ),
    TopicEntry(
        "line_totals",
        _t.line_totals("<pipeline>", "<line>"),
        "publishes",
        "1",
        "yes",
        "with `pipelines[].lines`: as `count`",
        "the line's crossings counted since `since`, in and out, overall and per label",
        "totals.schema.json",
    ),
    TopicEntry(
        "infer",
        _t.infer("<model>"),
        "subscribes (`infer/+`)",
        "1",
        "no",
        "`serve.mqtt` (default true) with models in `serve.models`",
        "a request for the served model: Open Inference Protocol JSON, or a JPEG or PNG image (MQTT 5 Content "
        "Type); answered on the request's Response Topic, or under MQTT 3.1.1 inside the envelope "
        '`{"reply_to": ..., "correlation_id": ..., "request" or "image": ...}`',
    ),
    TopicEntry(
        "fleet_infer",
        _t.fleet_infer("<model>"),
        f"subscribes as `{shared('<group>', _t.fleet_infer('+'))}`",
        "1",
        "no",
        "`serve.share_group`",
        "the same requests as `infer`, each taken by one box of the share group",
    ),
    TopicEntry(
        "command",
        _t.command,
        "subscribes",
        "1",
        "no",
        "`control.keys` lists at least one key",
        "an operator's signed command (as `edge-runtime fleet` sends), answered on the reply topic it names",
    ),
    TopicEntry(
        "rollout",
        _t.rollout("<rollout_id>"),
        "publishes",
        "1",
        "yes",
        "a rollout or rollback, at each stage it reaches",
        "a JSON object with the rollout's "
        + ", ".join(f"`{f.name}`" for f in fields(RolloutRecord))
        + "; `stage` is one of "
        + ", ".join(f"`{stage.value}`" for stage in Stage),
    ),
    TopicEntry(
        "qos_check",
        _t.qos_check,
        "subscribes, then unsubscribes",
        "2",
        "no",
        "once per session, under MQTT 3.1.1, when a pipeline publishes at QoS 2",
        "nothing is published here: the QoS the broker grants tells whether it takes QoS 2",
    ),
    TopicEntry(
        "reply topic",
        "the reply topic a request or command names",
        "publishes",
        "1",
        "no",
        "answering a request or a command",
        'the answer as JSON; errors as `{"error": ..., "code": ...}`; a reply topic under `<prefix>/` is refused',
    ),
    TopicEntry(
        "enabled",
        _t.enabled("<pipeline>"),
        "publishes",
        "1",
        "yes",
        "`homeassistant.controls`: at start, on reload and after every reconnect",
        "`ON` while the pipeline runs, `OFF` while its switch (or a signed command) keeps it off",
    ),
    TopicEntry(
        "enabled_set",
        _t.enabled_set("<pipeline>"),
        "subscribes (`+/enabled/set`)",
        "1",
        "no",
        "`homeassistant.controls`",
        "`ON` or `OFF` from Home Assistant's switch: the pipeline is turned on or off as by `pipeline enable` or "
        "`disable`, kept across restarts; anything else is counted and dropped. Limit who may publish here with "
        "the broker's ACL",
    ),
    TopicEntry(
        "homeassistant.discovery_prefix",
        "<discovery_prefix>/device/edge_runtime_<device_id>/<part>/config",
        "publishes",
        "1",
        "yes",
        "the `homeassistant` section: at start, after every reconnect, when Home Assistant says `online`, and "
        "on reload; emptied for a pipeline removed, and for all when discovery is turned off",
        "Home Assistant's device discovery document: one for the box (`<part>` is `box`) and one per running "
        "pipeline (`pipeline_<pipeline>`), listing its entities (see the Home Assistant recipe)",
    ),
    TopicEntry(
        "homeassistant.status_topic",
        "<discovery_prefix>/status",
        "subscribes",
        "1",
        "no",
        "the `homeassistant` section",
        "Home Assistant's `online` after each of its connects, upon which the box sends its discovery documents, "
        "every retained state and its stats again",
    ),
    TopicEntry(
        "pipelines[].source.topics",
        "each of `pipelines[].source.topics`",
        "subscribes",
        "`pipelines[].source.qos` (default 1)",
        "no",
        "a pipeline whose source has `type: mqtt`",
        "sensor readings, as `pipelines[].source.payload` says (see the config reference)",
    ),
)

INTRO = """\
`<prefix>` is `mqtt.topic_prefix` (default `edge`), `<device_id>` is `device_id`; `<pipeline>` and
`<model>` are the names of a pipeline and of a served model in the config file; `<label>` is a label of
the pipeline's model, `<zone>` and `<line>` names from the pipeline's `zones` and `lines`, `<event_id>` a
tracked object's id. Subscribers (Home Assistant, Node-RED, cloud ingest) match on these topics, so they
change only with the schema versions of their messages. Retained counts are all published at start-up
and after every reconnect, so a restarted box never leaves a subscriber seeing someone still there."""


def topics_page() -> str:
    rows = [
        (_topic(entry), cell(entry.direction), cell(entry.qos), cell(entry.retained), cell(entry.when))
        for entry in TOPICS
    ]
    lines = [generated_notice(), "", "# MQTT topics", "", INTRO, ""]
    lines += table(("topic", "the daemon", "QoS", "retained", "when"), rows)
    for entry in TOPICS:
        lines += ["", f"## {entry.name}", "", _topic(entry), "", sentence(entry.payload)]
        if entry.schema is not None:
            lines += _schema_section(entry.schema)
    return "\n".join(lines) + "\n"


def _schema_section(name: str) -> list[str]:
    text = resources.files("edge_runtime.schemas").joinpath(name).read_text(encoding="utf-8")
    schema = json.loads(text)
    lines = ["", f"JSON Schema: `edge_runtime/schemas/{name}`. {cell(schema.get('description', ''))}", ""]
    lines += _fields_table(schema, schema)
    for part, definition in schema.get("$defs", {}).items():
        if "properties" in definition:
            lines += ["", f"`{part}`: {cell(definition.get('description', ''))}", ""]
            lines += _fields_table(definition, schema)
    body = text.rstrip("\n")
    return [*lines, "", "<details><summary>The whole schema</summary>", "", "```json", body, "```", "", "</details>"]


def _fields_table(schema: dict[str, Any], root: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", ()))
    rows = [
        (code(key), _json_type(value, root), "yes" if key in required else "no", cell(value.get("description", "")))
        for key, value in schema.get("properties", {}).items()
    ]
    return table(("field", "type", "required", "description"), rows)


def _topic(entry: TopicEntry) -> str:
    """A topic as a code span; a sentence standing for topics the config or a request names, as prose."""
    return code(entry.topic) if entry.topic.startswith("<") else cell(entry.topic)


def _json_type(value: dict[str, Any], root: dict[str, Any]) -> str:
    reference = value.get("$ref", "")
    if "type" not in value and reference.startswith("#/$defs/"):  # a part of the same schema: its type
        return _json_type(root["$defs"][reference.removeprefix("#/$defs/")], root)
    if "const" in value:
        return f"`{json.dumps(value['const'])}`"
    if "enum" in value:
        return " or ".join(f"`{json.dumps(item)}`" for item in value["enum"])
    kind = value.get("type", "object" if "properties" in value or "$ref" in value else "any")
    return " or ".join(kind) if isinstance(kind, list) else str(kind)
