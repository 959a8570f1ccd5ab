"""When the documents reach a real broker: at start, on Home Assistant's birth, on a reload and a reconnect."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker import Mosquitto
from waiting import wait_for

from edge_runtime.config.schema import DaemonConfig
from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.discovery_publisher import ANNOUNCE_INTERVAL_S, DiscoveryPublisher
from edge_runtime.mqtt.retained import RetainedStates
from edge_runtime.mqtt.settings import MqttSettings
from edge_runtime.mqtt.topics import Topics

BOX_DOC = "homeassistant/device/edge_runtime_box-1/box/config"
ENTRANCE_DOC = "homeassistant/device/edge_runtime_box-1/pipeline_entrance/config"
PORCH_DOC = "homeassistant/device/edge_runtime_box-1/pipeline_porch/config"
YARD = {"polygon": [[0, 0.5], [1, 0.5], [1, 1], [0, 1]]}


def config(*names: str, zones: tuple[str, ...] = ("yard",), homeassistant: Any = None) -> DaemonConfig:
    pipelines = [
        {
            "name": name,
            "source": {"type": "file", "path": "clip.mp4"},
            "model": {"path": "models/detector"},
            "track": {"labels": ["person"]},
            "zones": {zone: YARD for zone in zones},
        }
        for name in names
    ]
    section = {} if homeassistant is None else homeassistant
    return DaemonConfig.model_validate({"device_id": "box-1", "pipelines": pipelines, "homeassistant": section})


class Box:
    """The daemon's three MQTT parts that discovery uses, on a real connection; the supervisor's refresh
    loop stands in as the test's `tick`."""

    def __init__(self, broker: Mosquitto, record: Path | None = None) -> None:
        self.connection = MqttConnection(MqttSettings(host=broker.host, port=broker.port), "box-1")
        self.states = RetainedStates(self.connection)
        self.discovery = DiscoveryPublisher(self.connection, self.states, Topics("edge", "box-1"), record)

    def tick(self) -> bool:
        self.states.refresh()
        self.discovery.announce_if_asked()
        return self.states.in_session


@pytest.fixture
def running(mosquitto: Mosquitto) -> Iterator[Box]:
    box = Box(mosquitto)
    box.discovery.apply(config("entrance"))
    box.connection.start()
    assert wait_for(box.tick, 10)
    assert box.connection.wait_subscribed(10)
    yield box
    box.connection.stop()


def retained(broker: Mosquitto) -> dict[str, bytes]:
    late = broker.subscribe_collect("homeassistant/#")
    late.wait_until(lambda m: bool(m), timeout=1)
    time.sleep(0.2)
    late.close()
    return {m.topic: m.payload for m in late.messages if m.retain}


def components(payload: bytes) -> set[str]:
    return set(json.loads(payload)["components"])


def test_documents_are_retained_from_the_start_and_sent_again_when_home_assistant_comes_online(
    mosquitto: Mosquitto, running: Box
) -> None:
    assert wait_for(lambda: set(retained(mosquitto)) == {BOX_DOC, ENTRANCE_DOC}, 10)
    assert {"zone_yard_occupancy", "count_person", "fps"} <= components(retained(mosquitto)[ENTRANCE_DOC])
    running.states.put("edge/box-1/entrance/zone/yard/occupied", b"OFF")
    watcher = mosquitto.subscribe_collect("#")
    held = {BOX_DOC, ENTRANCE_DOC, "edge/box-1/status", "edge/box-1/entrance/zone/yard/occupied"}
    assert watcher.wait_until(lambda m: {x.topic for x in m} == held, timeout=5)  # what is retained
    time.sleep(0.3)
    seen = len(watcher.messages)
    mosquitto.publish("homeassistant/status", b"offline")  # its will: nothing to do
    time.sleep(0.5)
    assert len(watcher.messages) == seen + 1 and running.discovery.births == 0
    mosquitto.publish("homeassistant/status", b"online", retain=False)
    again = {"homeassistant/status", BOX_DOC, ENTRANCE_DOC, "edge/box-1/entrance/zone/yard/occupied"}
    assert wait_for(lambda: running.tick() and {x.topic for x in watcher.messages[seen + 1 :]} == again, 5)
    assert running.discovery.births == running.discovery.announcements == 1


def test_a_flood_of_births_is_answered_at_most_every_interval(mosquitto: Mosquitto, running: Box) -> None:
    watcher = mosquitto.subscribe_collect(ENTRANCE_DOC)
    assert watcher.wait_count(1)  # retained
    mosquitto.publish("homeassistant/status", b"online")
    assert wait_for(lambda: running.tick() and running.discovery.announcements == 1, 5)
    answered_at = time.monotonic()
    for _ in range(50):
        mosquitto.publish("homeassistant/status", b"online")
    assert wait_for(lambda: running.tick() and running.discovery.births == 51, 10)
    while time.monotonic() - answered_at < ANNOUNCE_INTERVAL_S * 0.8:
        running.tick()
        time.sleep(0.05)
    assert running.discovery.announcements == 1
    assert wait_for(lambda: running.tick() and running.discovery.announcements == 2, ANNOUNCE_INTERVAL_S)
    assert time.monotonic() - answered_at >= ANNOUNCE_INTERVAL_S  # the flood, answered once after the interval
    time.sleep(0.3)
    assert len(watcher.messages) == 3


def test_a_reload_removes_what_is_gone_and_turning_discovery_off_removes_every_document(
    mosquitto: Mosquitto, running: Box
) -> None:
    assert wait_for(lambda: set(retained(mosquitto)) == {BOX_DOC, ENTRANCE_DOC}, 10)
    running.discovery.apply(config("entrance", "porch"))
    assert wait_for(lambda: set(retained(mosquitto)) == {BOX_DOC, ENTRANCE_DOC, PORCH_DOC}, 10)

    running.discovery.apply(config("porch", zones=("front",)))  # the entrance removed, the porch's zone replaced
    assert wait_for(lambda: set(retained(mosquitto)) == {BOX_DOC, PORCH_DOC}, 10)
    porch = json.loads(retained(mosquitto)[PORCH_DOC])["components"]
    assert porch["zone_front_occupancy"]["state_topic"] == "edge/box-1/porch/zone/front/occupied"
    assert porch["zone_yard_occupancy"] == {"platform": "binary_sensor"}  # how Home Assistant removes one
    running.discovery.apply(config("porch", zones=()))  # no zone left: the pipeline follows no objects
    live = lambda: {k for k, c in json.loads(retained(mosquitto)[PORCH_DOC])["components"].items() if len(c) > 1}  # noqa: E731
    assert wait_for(lambda: live() == {"fps", "inference_latency", "model"}, 10)

    running.discovery.apply(config("porch", zones=(), homeassistant={"enabled": False}))
    assert wait_for(lambda: retained(mosquitto) == {}, 10)
    mosquitto.publish("homeassistant/status", b"online")  # no longer followed
    time.sleep(0.5)
    running.tick()
    assert running.discovery.births == running.discovery.announcements == 0


def test_a_reconnect_of_the_box_puts_the_documents_again_on_a_broker_that_lost_them(tmp_path: Path) -> None:
    with Mosquitto(tmp_path / "broker") as broker:  # no persistence: a restart forgets every retained message
        box = Box(broker)
        box.discovery.apply(config("entrance"))
        box.connection.start()
        try:
            assert wait_for(box.tick, 10)
            assert wait_for(lambda: set(retained(broker)) == {BOX_DOC, ENTRANCE_DOC}, 10)
            broker.restart()
            assert wait_for(lambda: box.connection.connect_count == 2 and box.tick(), 20)
            assert wait_for(lambda: set(retained(broker)) == {BOX_DOC, ENTRANCE_DOC}, 10)
        finally:
            box.connection.stop()


def test_a_custom_discovery_prefix_and_status_topic_are_followed(mosquitto: Mosquitto) -> None:
    box = Box(mosquitto)
    box.discovery.apply(config("entrance", homeassistant={"discovery_prefix": "ha", "status_topic": "ha/alive"}))
    box.connection.start()
    try:
        assert wait_for(box.tick, 10) and box.connection.wait_subscribed(10)
        watcher = mosquitto.subscribe_collect("ha/#")
        assert watcher.wait_until(lambda m: {x.topic for x in m} >= {"ha/device/edge_runtime_box-1/box/config"}, 5)
        mosquitto.publish("ha/alive", b"online")
        assert wait_for(lambda: box.tick() and box.discovery.announcements == 1, 5)
    finally:
        box.connection.stop()


def test_what_was_taken_out_while_the_box_was_stopped_is_removed_at_its_start(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    record = tmp_path / "state" / "homeassistant-discovery.json"
    first = Box(mosquitto, record)
    first.discovery.apply(config("entrance", "porch"))
    first.connection.start()
    try:
        assert wait_for(first.tick, 10)
        assert wait_for(lambda: set(retained(mosquitto)) == {BOX_DOC, ENTRANCE_DOC, PORCH_DOC}, 10)
    finally:
        first.connection.stop()

    second = Box(mosquitto, record)  # the config edited meanwhile: the entrance gone, the porch's zone renamed
    second.discovery.apply(config("porch", zones=("front",)))
    second.connection.start()
    try:
        assert wait_for(second.tick, 10)
        assert wait_for(lambda: set(retained(mosquitto)) == {BOX_DOC, PORCH_DOC}, 10)
        porch = json.loads(retained(mosquitto)[PORCH_DOC])["components"]
        assert (
            porch["zone_yard_occupancy"] == {"platform": "binary_sensor"}
            and "state_topic" in porch["zone_front_occupancy"]
        )
    finally:
        second.connection.stop()


def test_an_unreadable_record_announces_what_runs_and_no_removal_it_cannot_know(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    record = tmp_path / "homeassistant-discovery.json"
    for content in ("not json", '["a list"]', '{"homeassistant/device/x/config": {"c": "switch\\u0000"}}'):
        record.write_text(content)
        box = Box(mosquitto, record)
        box.discovery.apply(config("entrance"))
        documents = {topic: json.loads(payload) for topic, payload in box.discovery.documents.items()}
        assert set(documents) == {BOX_DOC, ENTRANCE_DOC}
        assert all(len(c) > 1 for doc in documents.values() for c in doc["components"].values())
