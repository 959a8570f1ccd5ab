"""Discovery documents hold only what Home Assistant 2026.11 accepts, on topics its discovery matches.

The key lists are those of Home Assistant 2026.11.0's MQTT integration (`components/mqtt/schemas.py` and
each platform's schema), as the project's notes on Home Assistant record them: an unknown key in `device`
makes Home Assistant reject the whole document, and a device document without `origin` is dropped. The
templates are rendered with Jinja on the payloads the box really publishes, so a template that would fail
in Home Assistant fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from pydantic import ValidationError

from edge_runtime.config.schema import DaemonConfig
from edge_runtime.mqtt.discovery import Announcement, announcement, discovery_id, entity_slug
from edge_runtime.mqtt.discovery_settings import HomeAssistantSettings
from edge_runtime.mqtt.topics import Topics
from edge_runtime.tracking.counts import crossing_message, totals_message
from edge_runtime.tracking.presence import Crossing, LineTotals

# Home Assistant 2026.11.0, components/mqtt/discovery.py
TOPIC_MATCHER = re.compile(r"(?P<component>\w+)/(?:(?P<node_id>[a-zA-Z0-9_-]+)/)?(?P<object_id>[a-zA-Z0-9_-]+)/config")
# homeassistant/core.py: VALID_ENTITY_ID
VALID_ENTITY_ID = re.compile(r"^(?!.+__)(?!_)[\da-z_]+(?<!_)\.(?!_)[\da-z_]+(?<!_)$")

DEVICE_KEYS = {
    "identifiers", "connections", "manufacturer", "model", "model_id", "name", "hw_version", "serial_number",
    "sw_version", "via_device", "suggested_area", "configuration_url",
}  # fmt: skip
ORIGIN_KEYS = {"name", "sw_version", "support_url"}
AVAILABILITY_KEYS = {"availability", "availability_mode", "availability_template", "availability_topic",
                     "payload_available", "payload_not_available"}  # fmt: skip
DOCUMENT_KEYS = AVAILABILITY_KEYS | {
    "device", "components", "child_devices", "origin", "state_topic", "command_topic", "message_expiry_interval",
    "qos", "encoding",
}  # fmt: skip
ENTITY_KEYS = AVAILABILITY_KEYS | {
    "platform", "device", "entity_picture", "origin", "enabled_by_default", "entity_category", "icon",
    "json_attributes_topic", "json_attributes_template", "default_entity_id", "message_expiry_interval", "unique_id",
    "visible_by_default", "name", "qos", "encoding", "state_topic", "value_template",
}  # fmt: skip
PLATFORM_KEYS = {
    "sensor": {"device_class", "expire_after", "force_update", "last_reset_value_template", "options", "state_class",
               "suggested_display_precision", "unit_of_measurement"},
    "binary_sensor": {"device_class", "expire_after", "force_update", "off_delay", "payload_off", "payload_on"},
    "image": {"content_type", "image_encoding", "image_topic", "url_template", "url_topic"},
    "event": {"device_class", "event_types"},
    "switch": {"command_template", "command_topic", "device_class", "payload_off", "payload_on", "state_off",
               "state_on", "value_template", "optimistic", "retain"},
}  # fmt: skip
STATE_CLASSES = {"measurement", "measurement_angle", "total", "total_increasing"}

TRACK = {"labels": ["person", "car"]}
YARD = {"polygon": [[0, 0.5], [1, 0.5], [1, 1], [0, 1]]}
GATE = {"points": [[0.5, 0], [0.5, 1]], "inbound": "left"}


def box(pipelines: list[dict[str, Any]], homeassistant: dict[str, Any] | None = None, **fields: Any) -> DaemonConfig:
    return DaemonConfig.model_validate(
        {"device_id": "box-1", "pipelines": pipelines, "homeassistant": homeassistant or {}} | fields
    )


def camera(name: str = "entrance", **fields: Any) -> dict[str, Any]:
    pipeline = {
        "name": name,
        "source": {"type": "file", "path": "clip.mp4"},
        "model": {"path": "models/detector"},
        "track": TRACK,
        "zones": {"yard": YARD, "drive": YARD | {"labels": ["car"]}},
        "lines": {"gate": GATE},
        "events": {},
    }
    return pipeline | fields


def documents_of(config: DaemonConfig) -> Announcement:
    assert config.homeassistant is not None
    return announcement(config.homeassistant, config, Topics(config.mqtt.topic_prefix, config.device_id))


def components(announced: Announcement) -> dict[str, dict[str, Any]]:
    """Every entity by its unique id, with the device document it came in."""
    found: dict[str, dict[str, Any]] = {}
    for document in announced.documents.values():
        for component in document["components"].values():
            assert component["unique_id"] not in found
            found[component["unique_id"]] = component | {"device": document["device"]}
    return found


def by_name(announced: Announcement, device: str) -> dict[str, dict[str, Any]]:
    [document] = [doc for doc in announced.documents.values() if doc["device"]["name"] == device]
    return {component["name"]: component for component in document["components"].values()}


def test_every_document_holds_only_keys_home_assistant_accepts_with_origin_and_availability() -> None:
    config = box([camera(), camera("porch", zones={}, lines={})])
    announced = documents_of(config)
    assert len(announced.documents) == 3  # the box and each pipeline
    for topic, document in announced.documents.items():
        assert set(document) <= DOCUMENT_KEYS
        assert set(document["device"]) <= DEVICE_KEYS and document["device"]["identifiers"]
        assert set(document["origin"]) <= ORIGIN_KEYS and document["origin"]["name"]
        assert document["availability"] == [
            {"topic": "edge/box-1/status", "payload_available": "online", "payload_not_available": "offline"}
        ]
        match = TOPIC_MATCHER.fullmatch(topic.removeprefix("homeassistant/"))
        assert topic.startswith("homeassistant/") and match is not None and match["component"] == "device"
        assert match["node_id"] == "edge_runtime_box-1"  # one level per box, for the broker's ACL
        for component_id, component in document["components"].items():
            assert re.fullmatch(r"[a-zA-Z0-9_-]+", component_id)
            platform = component["platform"]
            assert set(component) <= ENTITY_KEYS | PLATFORM_KEYS[platform], platform
            assert VALID_ENTITY_ID.match(component["default_entity_id"])
            assert component["default_entity_id"].startswith(f"{platform}.")
            assert component.get("state_class", "measurement") in STATE_CLASSES
    json.loads(announced.payloads()[next(iter(announced.documents))])
    entity_ids = [c["default_entity_id"] for c in components(announced).values()]
    assert len(entity_ids) == len(set(entity_ids))


def test_a_pipeline_shows_counts_and_occupancy_per_label_and_zone_pictures_and_line_crossings() -> None:
    announced = documents_of(box([camera()]))
    pipeline = by_name(announced, "box-1 entrance")
    assert pipeline["person count"]["state_topic"] == "edge/box-1/entrance/count/person"
    assert pipeline["person count"]["state_class"] == "measurement"
    assert pipeline["Objects"]["state_topic"] == "edge/box-1/entrance/count/all"
    assert pipeline["car occupancy"]["platform"] == "binary_sensor"
    assert pipeline["yard occupancy"] == pipeline["yard occupancy"] | {
        "platform": "binary_sensor",
        "state_topic": "edge/box-1/entrance/zone/yard/occupied",
        "device_class": "occupancy",
        "default_entity_id": "binary_sensor.box_1_entrance_zone_yard_occupancy",
    }
    assert pipeline["yard person count"]["state_topic"] == "edge/box-1/entrance/zone/yard/count/person"
    assert "drive person count" not in pipeline and "drive car count" in pipeline  # the drive counts cars only
    assert pipeline["person snapshot"] == pipeline["person snapshot"] | {
        "platform": "image",
        "image_topic": "edge/box-1/entrance/person/snapshot",
        "content_type": "image/jpeg",
    }
    assert pipeline["gate crossing"]["platform"] == "event" and pipeline["gate crossing"]["event_types"] == [
        "in",
        "out",
    ]
    assert (
        pipeline["gate in"]["state_topic"]
        == pipeline["gate out"]["state_topic"]
        == ("edge/box-1/entrance/line/gate/totals")
    )
    assert pipeline["Model"]["state_topic"] == "edge/box-1/entrance/model"
    device = announced.documents["homeassistant/device/edge_runtime_box-1/pipeline_entrance/config"]["device"]
    assert device["via_device"] == "edge_runtime|box-1" and device["name"] == "box-1 entrance"
    assert set(by_name(announced, "box-1")) == {"Results waiting", "Last rollout", "Model release"}


def test_the_settings_choose_labels_and_kinds_and_a_pipeline_without_objects_shows_its_health_only() -> None:
    settings = {"pipelines": {"entrance": {"labels": ["car"], "snapshots": False, "lines": False, "zones": False}}}
    plain = {"name": "classifier", "source": {"type": "file", "path": "c.mp4"}, "model": {"path": "m"}}
    announced = documents_of(box([camera(), plain], settings))
    pipeline = by_name(announced, "box-1 entrance")
    assert {"car count", "car occupancy", "Objects", "Occupancy"} <= set(pipeline)
    assert not [name for name in pipeline if "person" in name or "gate" in name or "yard" in name]
    assert not [c for c in pipeline.values() if c["platform"] == "image"]
    assert set(by_name(announced, "box-1 classifier")) == {"Frames per second", "Inference latency", "Model"}


def test_a_pipeline_turned_off_has_no_device_and_the_section_names_only_pipelines_of_the_box() -> None:
    announced = documents_of(box([camera(), camera("porch", enabled=False)]))
    assert [doc["device"]["name"] for doc in announced.documents.values()] == ["box-1", "box-1 entrance"]
    with pytest.raises(ValidationError, match="'garage', which is not a pipeline of this box"):
        box([camera()], {"pipelines": {"garage": {}}})
    with pytest.raises(ValidationError, match="discovery_prefix"):
        box([camera()], {"discovery_prefix": "home/assistant"})
    with pytest.raises(ValidationError, match="status_topic"):
        box([camera()], {"status_topic": "homeassistant/#"})
    assert HomeAssistantSettings().birth_topic == "homeassistant/status"
    assert HomeAssistantSettings(discovery_prefix="ha").birth_topic == "ha/status"


def render(template: str, payload: bytes) -> str:
    """A value template on a payload, as Home Assistant's MQTT entities render it (value and value_json)."""
    environment = jinja2.Environment(undefined=jinja2.ChainableUndefined)
    try:
        value_json = json.loads(payload)
    except ValueError:
        value_json = None
    return environment.from_string(template).render(value=payload.decode(), value_json=value_json)


def test_the_templates_read_what_the_box_publishes() -> None:
    pipeline = by_name(documents_of(box([camera()])), "box-1 entrance")
    assert render(pipeline["person occupancy"]["value_template"], b"2") == "ON"
    assert render(pipeline["person occupancy"]["value_template"], b"0") == "OFF"
    crossing = Crossing(line="gate", direction="out", track_id="t-7", label="car", time=1.5)
    event = json.loads(
        render(pipeline["gate crossing"]["value_template"], json.dumps(crossing_message(crossing)).encode())
    )
    assert event == {"event_type": "out", "label": "car", "track_id": "t-7"}
    totals = LineTotals(since=0.0, inbound=3, outbound=1, by_label={"car": {"in": 3, "out": 1}})
    payload = json.dumps(totals_message(totals)).encode()
    assert (
        render(pipeline["gate in"]["value_template"], payload),
        render(pipeline["gate out"]["value_template"], payload),
    ) == ("3", "1")
    stats = {
        "pipelines": {"entrance": {"fps_in": 9.5, "latency_ms": {"infer": {"p50": 12.25}}}},
        "mqtt": {"spool_depth": 4},
        "rollout": {},
    }
    report = json.dumps(stats).encode()
    assert render(pipeline["Frames per second"]["value_template"], report) == "9.5"
    assert render(pipeline["Inference latency"]["value_template"], report) == "12.25"
    assert render(pipeline["Frames per second"]["value_template"], json.dumps({"pipelines": {}}).encode()) == "None"
    box_entities = by_name(documents_of(box([camera()])), "box-1")
    assert render(box_entities["Results waiting"]["value_template"], report) == "4"
    assert render(box_entities["Last rollout"]["value_template"], report) == "none"
    model = json.dumps({"name": "detector", "version": "3", "variant": "fp32"}).encode()
    assert render(pipeline["Model"]["value_template"], model) == "detector 3"


def test_names_from_a_config_or_a_model_cannot_leave_their_template_or_their_topic_level() -> None:
    label = 'x"}}{{ 7*7 }}'  # a model's label: spaces allowed
    name = 'door"}}{{7*7}}{{"'  # a pipeline name: a topic level, so no spaces
    config = box([camera(name, track={"labels": [label]}, zones={}, lines={})], device_id="box.1")
    announced = documents_of(config)
    for topic in announced.documents:
        assert TOPIC_MATCHER.fullmatch(topic.removeprefix("homeassistant/"))
    pipeline = by_name(announced, f"box.1 {name}")
    assert VALID_ENTITY_ID.match(pipeline[f"{label} occupancy"]["default_entity_id"])
    fps = pipeline["Frames per second"]["value_template"]
    assert render(fps, b'{"pipelines": {}}') == "None"
    assert render(fps, json.dumps({"pipelines": {name: {"fps_in": 3.0}}}).encode()) == "3.0"
    assert discovery_id("a.b") != discovery_id("a:b") and discovery_id("plain-id_1") == "plain-id_1"
    assert entity_slug("Box-1", "Zone A") == "box_1_zone_a" and VALID_ENTITY_ID.match(f"sensor.{entity_slug('€')}")


def test_the_documents_are_the_same_for_the_same_config() -> None:
    """A reload that changes nothing of a pipeline sends Home Assistant nothing new."""
    assert documents_of(box([camera()])).payloads() == documents_of(box([camera()])).payloads()


def test_the_entity_ids_the_documentation_lists_are_those_the_box_announces() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "recipes" / "home-assistant.md"
    text = page.read_text(encoding="utf-8")
    first_config = text.split("```yaml\n", 1)[1].split("```", 1)[0].replace("!credential door-camera-url", "rtsp://x")
    announced = {
        c["default_entity_id"]
        for c in components(documents_of(DaemonConfig.model_validate(yaml.safe_load(first_config)))).values()
    }
    listed = set(re.findall(r"`((?:sensor|binary_sensor|image|event)\.gate_3_[a-z0-9_]+)`", text))
    assert len(listed) >= 12 and listed <= announced, listed - announced


def test_names_that_join_alike_still_give_every_entity_its_own_component() -> None:
    zones = {"a_count_b": YARD, "a": YARD}
    config = box([camera(track={"labels": ["b_count", "x"]}, zones=zones, lines={})])
    [pipeline] = [doc for doc in documents_of(config).documents.values() if doc["device"]["name"] == "box-1 entrance"]
    names = [component["name"] for component in pipeline["components"].values()]
    assert "a b_count count" in names and "a_count_b count" in names and len(names) == len(set(names))


def test_controls_add_a_switch_per_pipeline_and_keep_a_switched_off_pipeline_to_turn_it_on_again() -> None:
    config = box([camera(), camera("porch", enabled=False)], {"controls": True})
    assert "Running" not in by_name(documents_of(box([camera()])), "box-1 entrance")  # off by default
    announced = announcement(config.homeassistant, config, Topics("edge", "box-1"), switched_off=["porch"])  # type: ignore[arg-type]
    switch = by_name(announced, "box-1 entrance")["Running"]
    assert switch == switch | {
        "platform": "switch",
        "state_topic": "edge/box-1/entrance/enabled",
        "command_topic": "edge/box-1/entrance/enabled/set",
        "payload_on": "ON",
        "payload_off": "OFF",
    }
    assert set(by_name(announced, "box-1 porch")) == {"Running"}  # nothing else of a pipeline that is not running
    assert "box-1 porch" not in {d["device"]["name"] for d in documents_of(config).documents.values()}
