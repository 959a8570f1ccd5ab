"""The daemon announces itself to Home Assistant on a real broker: at start, on Home Assistant's birth, on reload.

What Home Assistant itself makes of the documents is tests/homeassistant's (`make test-homeassistant`); this
checks the daemon's side with the broker alone, so `make test` covers the wiring.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker import Mosquitto
from daemon_process import FACE_MODEL, DaemonProcess
from waiting import wait_for

PIPELINE_DOC = "homeassistant/device/edge_runtime_test-box/pipeline_faces/config"
BOX_DOC = "homeassistant/device/edge_runtime_test-box/box/config"


def retained(broker: Mosquitto, topic: str = "homeassistant/#") -> dict[str, bytes]:
    late = broker.subscribe_collect(topic)
    late.wait_until(lambda m: bool(m), timeout=1)
    time.sleep(0.3)
    late.close()
    return {m.topic: m.payload for m in late.messages if m.retain}


def components(payload: bytes) -> set[str]:
    return set(json.loads(payload)["components"])


def test_the_daemon_announces_its_pipelines_again_on_a_birth_and_follows_a_reload(
    mosquitto: Mosquitto,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    source = {"type": "file", "path": str(clip(20)), "realtime": True, "loop": True}
    yard = {"polygon": [[0, 0], [0.05, 0], [0.05, 0.05], [0, 0.05]]}  # a corner no face reaches
    faces: dict[str, Any] = {"name": "faces", "source": source, "model": {"path": str(FACE_MODEL)},
                             "track": {"labels": ["face"]}, "zones": {"yard": yard}}  # fmt: skip
    config = write_config(mosquitto, [faces], homeassistant={})
    daemon = run_daemon(config)
    assert wait_for(lambda: set(retained(mosquitto)) == {BOX_DOC, PIPELINE_DOC}, 60), daemon.log
    assert {"zone_yard_occupancy", "count_face", "fps"} <= components(retained(mosquitto)[PIPELINE_DOC])
    # the states the entities read are there: the box online, nobody in the corner
    states = retained(mosquitto, "edge/test-box/#")
    assert states["edge/test-box/faces/zone/yard/occupied"] == b"OFF" and states["edge/test-box/status"] == b"online"

    watcher = mosquitto.subscribe_collect("homeassistant/device/#")
    assert watcher.wait_count(2)  # the retained documents, at once
    mosquitto.publish("homeassistant/status", b"online")  # Home Assistant (re)started
    assert watcher.wait_count(4), daemon.log
    assert {m.topic for m in watcher.messages[2:]} == {BOX_DOC, PIPELINE_DOC}

    write_config(mosquitto, [faces | {"zones": {"porch": yard}}], homeassistant={})
    daemon.signal(signal.SIGHUP)
    replaced = lambda: "zone_porch_occupancy" in components(retained(mosquitto).get(PIPELINE_DOC, b"{}") or b"{}")  # noqa: E731
    assert wait_for(replaced, 60), daemon.log
    removed = json.loads(retained(mosquitto)[PIPELINE_DOC])["components"]["zone_yard_occupancy"]
    assert removed == {"platform": "binary_sensor"}  # how Home Assistant is told to remove it

    write_config(mosquitto, [faces], homeassistant={"enabled": False})
    daemon.signal(signal.SIGHUP)
    assert wait_for(lambda: retained(mosquitto) == {}, 30), daemon.log
    assert daemon.stop() == 0


def test_the_switch_turns_a_pipeline_off_and_on_and_anything_else_on_its_topic_is_dropped(
    mosquitto: Mosquitto,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    source = {"type": "file", "path": str(clip(20)), "realtime": True, "loop": True}
    faces = {"name": "faces", "source": source, "model": {"path": str(FACE_MODEL)}}
    daemon = run_daemon(write_config(mosquitto, [faces], homeassistant={"controls": True}))
    state, command = "edge/test-box/faces/enabled", "edge/test-box/faces/enabled/set"
    assert wait_for(lambda: retained(mosquitto, state).get(state) == b"ON", 60), daemon.log
    assert "Running" in {c["name"] for c in json.loads(retained(mosquitto)[PIPELINE_DOC])["components"].values()}

    for hostile in (b"off", b"ON\x00", b"x" * 100_000):
        mosquitto.publish(command, hostile)
    mosquitto.publish("edge/test-box/garage/enabled/set", b"OFF")  # no such pipeline
    assert wait_for(lambda: daemon.log.count("Home Assistant switch: dropped") == 4, 10), daemon.log

    mosquitto.publish(command, b"OFF")
    assert wait_for(lambda: retained(mosquitto, state).get(state) == b"OFF", 30), daemon.log
    assert "removed ('faces',)" in daemon.log
    kept = json.loads(retained(mosquitto)[PIPELINE_DOC])["components"]  # the switch alone, to turn it on again
    assert {key for key, c in kept.items() if len(c) > 1} == {"enabled"}

    mosquitto.publish(command, b"ON")
    assert wait_for(lambda: retained(mosquitto, state).get(state) == b"ON", 30), daemon.log
    assert wait_for(lambda: "added ('faces',)" in daemon.log, 30), daemon.log
    assert daemon.stop() == 0
