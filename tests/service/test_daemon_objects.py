"""A real daemon, a real broker and the real face detector following faces through zones and across a line.

The clips are rendered here: the astronaut's face pasted on a grey picture and moved along known straight
paths at 10 frames a second, played in real time. What the daemon publishes is compared with what those
paths say, exactly: which way each face crossed the line, which zones it entered and in which order.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import cv2
import jsonschema
import numpy as np
import pytest
from broker import Mosquitto, Received
from daemon_process import FACE_MODEL, DaemonProcess
from waiting import wait_for

from edge_runtime.pipeline.results import result_schema

BASE = "edge/test-box/faces"
FPS = 10
CROP = 260  # the astronaut's head and shoulders, square: the detector finds the face at about 0.8
FACE_CENTRE = 97  # the face box's centre from the crop's left edge, in pixels (measured on the photo)
TOP, BOTTOM = 10, 210  # the lanes: the top edge of the crop
LINE_X = 0.5
ZONES = {"left": (0.0, 0.35), "middle": (0.4, 0.6), "corner": (0.9, 1.0)}  # bands the full height of the picture
INERTIA = 3
TRACK = {"labels": ["face"], "lost_after_s": 0.5, "filters": {"default": {"threshold": 0.6}}}


@dataclass(frozen=True)
class Walk:
    """A face in a lane, its crop's left edge at each x from frame `first` on, one x a frame."""

    first: int
    xs: Sequence[int]
    lane: int

    def at(self, frame: int) -> int | None:
        step = frame - self.first
        return self.xs[step] if 0 <= step < len(self.xs) else None

    def centres(self) -> list[float]:
        """Where the face's box is centred across the picture, as a fraction of its width, frame by frame."""
        return [(x + FACE_CENTRE) / 640 for x in self.xs]

    def zones_entered(self) -> list[str]:
        """The zones whose band it stays in for more than inertia frames in a row, in the order it reached them."""
        entered = []
        for name, (left, right) in sorted(ZONES.items(), key=lambda zone: self._first_inside(*zone[1])):
            run = longest_run([left <= centre <= right for centre in self.centres()])
            if run > INERTIA + 1:  # one frame to spare for the box's jitter
                entered.append(name)
        return entered

    def crossing(self) -> str:
        """'in' for a walk from the left of the line to its right (the inbound side), 'out' the other way."""
        start, end = self.centres()[0], self.centres()[-1]
        assert (start - LINE_X) * (end - LINE_X) < 0, "the walk must cross the line"
        return "in" if end > LINE_X else "out"

    def _first_inside(self, left: float, right: float) -> int:
        return next((i for i, centre in enumerate(self.centres()) if left <= centre <= right), len(self.xs))


def longest_run(flags: Sequence[bool]) -> int:
    best = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        best = max(best, run)
    return best


def render(path: Path, photo: np.ndarray, walks: Sequence[Walk], frames: int) -> Path:
    crop = np.ascontiguousarray(photo[40:300, 120:380])
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), FPS, (640, 480))
    assert writer.isOpened()
    for frame in range(frames):
        canvas = np.full((480, 640, 3), 90, np.uint8)
        for walk in walks:
            x = walk.at(frame)
            if x is not None:
                canvas[walk.lane : walk.lane + CROP, x : x + CROP] = crop
        writer.write(canvas)
    writer.release()
    return path


def band(left: float, right: float) -> dict[str, Any]:
    return {"polygon": [[left, 0.0], [right, 0.0], [right, 1.0], [left, 1.0]], "inertia": INERTIA}


def objects_pipeline(clip: Path, **fields: Any) -> dict[str, Any]:
    pipeline = {
        "name": "faces",
        "source": {"type": "file", "path": str(clip), "realtime": True},
        "model": {"path": str(FACE_MODEL)},
        "track": TRACK,
        "zones": {name: band(*edges) for name, edges in ZONES.items()},
        "lines": {"gate": {"points": [[LINE_X, 0.0], [LINE_X, 1.0]], "inbound": "left"}},  # looking down: left is right
        "events": {},
    }
    return pipeline | fields


def validator(name: str) -> jsonschema.Draft202012Validator:
    text = resources.files("edge_runtime.schemas").joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    return jsonschema.Draft202012Validator(json.loads(text), format_checker=jsonschema.FormatChecker())


def valid(messages: list[Received], topic: str, schema: str) -> list[dict[str, Any]]:
    check = validator(schema)
    found = []
    for message in messages:
        if message.topic == topic and message.payload:
            found.append(json.loads(message.payload))
            check.validate(found[-1])
    return found


def retained_now(broker: Mosquitto, topic: str = f"{BASE}/#") -> dict[str, bytes]:
    """What a subscriber arriving now is given at once: the broker's retained messages."""
    late = broker.subscribe_collect(topic)
    late.wait_until(lambda m: bool(m), timeout=1)
    time.sleep(0.3)
    late.close()
    return {m.topic: m.payload for m in late.messages if m.retain}


# two faces, each through two zones and across the line, the other way from each other

WALKS = [
    Walk(0, [0] * 3 + [20 * i for i in range(20)], TOP),  # left to right, waiting in the left zone first
    Walk(12, [380 - 20 * i for i in range(20)] + [0] * 3, BOTTOM),  # right to left, ending in the left zone
]
FRAMES = 50  # 1.5 s of empty picture after the last face: both have ended by then


@pytest.fixture
def two_faces(astronaut_bgr: np.ndarray, tmp_path: Path) -> Path:
    return render(tmp_path / "two-faces.avi", astronaut_bgr, WALKS, FRAMES)


def test_line_totals_zone_entries_and_events_equal_the_paths_the_faces_took(
    mosquitto: Mosquitto,
    two_faces: Path,
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    assert [walk.crossing() for walk in WALKS] == ["in", "out"]
    assert [walk.zones_entered() for walk in WALKS] == [["left", "middle"], ["middle", "left"]]
    watcher = mosquitto.subscribe_collect("edge/test-box/#")
    daemon = run_daemon(write_config(mosquitto, [objects_pipeline(two_faces)]), exit_when_done=True)
    assert daemon.wait(120) == 0, daemon.log
    ended = lambda m: len([e for e in valid(m, f"{BASE}/events", "event") if e["type"] == "end"]) >= 2  # noqa: E731
    assert watcher.wait_until(ended, timeout=20), daemon.log
    messages = list(watcher.messages)

    events = valid(messages, f"{BASE}/events", "event")
    by_object: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_object.setdefault(event["after"]["id"], []).append(event)
    assert len(by_object) == len(WALKS)
    for story in by_object.values():
        kinds = [event["type"] for event in story]
        assert kinds[0] == "new" and kinds[-1] == "end" and kinds.count("new") == kinds.count("end") == 1
        assert set(kinds[1:-1]) <= {"update"}
    walkers = sorted(by_object.values(), key=lambda story: story[0]["after"]["start_time"])  # in order of arrival
    assert [story[-1]["after"]["entered_zones"] for story in walkers] == [walk.zones_entered() for walk in WALKS]

    crossings = valid(messages, f"{BASE}/line/gate", "crossing")
    assert [(c["direction"], c["label"]) for c in crossings] == [(walk.crossing(), "face") for walk in WALKS]
    assert [c["track_id"] for c in crossings] == [story[0]["after"]["id"] for story in walkers]
    [totals] = valid(messages, f"{BASE}/line/gate/totals", "totals")[-1:]
    assert (totals["in"], totals["out"], totals["by_label"]) == (1, 1, {"face": {"in": 1, "out": 1}})

    results = [json.loads(m.payload) for m in messages if m.topic == f"{BASE}/result"]
    for result in results:
        jsonschema.validate(result, result_schema())
    tracked = [d for result in results for d in result["result"]["detections"] if "track_id" in d]
    assert {d["track_id"] for d in tracked} == set(by_object)
    assert all("zones" in d for d in tracked) and any(d["zones"] == ["middle"] for d in tracked)

    occupied = [m.payload for m in messages if m.topic == f"{BASE}/zone/left/occupied"]
    # the states put at start reach the broker with its first session, as they are by then: the first face
    # may already be in the left zone
    assert [state for i, state in enumerate(occupied) if i == 0 or occupied[i - 1] != state][-4:] == [
        b"ON",
        b"OFF",
        b"ON",
        b"OFF",
    ]  # two visits
    assert b"ON" not in [m.payload for m in messages if m.topic == f"{BASE}/zone/corner/occupied"]
    final = retained_now(mosquitto)
    assert final[f"{BASE}/count/face"] == b"0" and final[f"{BASE}/zone/middle/occupied"] == b"OFF"
    assert json.loads(final[f"{BASE}/line/gate/totals"])["in"] == 1
    pictures = [m for m in messages if m.topic.endswith("/snapshot") and m.topic.startswith(f"{BASE}/events/")]
    assert {m.topic.split("/")[-2] for m in pictures} == set(by_object)
    assert not any(m.retain for m in pictures) and final.get(f"{BASE}/face/snapshot", b"").startswith(b"\xff\xd8")


# one face, arriving while the broker is away

LATE_WALK = Walk(30, [20 * i for i in range(20)], TOP)  # from 3 s in: long after the pipeline started


def test_counts_are_on_the_broker_before_any_object_and_again_after_it_restarts_and_events_outlive_an_outage(
    persistent_broker: Mosquitto,
    astronaut_bgr: np.ndarray,
    tmp_path: Path,
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    broker = persistent_broker
    clip = render(tmp_path / "late-face.avi", astronaut_bgr, [LATE_WALK], 110)  # still playing when it is back
    watcher = broker.subscribe_collect("edge/test-box/#", client_id="watcher")  # its session outlives restarts
    daemon = run_daemon(write_config(broker, [objects_pipeline(clip)]), exit_when_done=True)
    assert watcher.wait_until(lambda m: any(x.topic == f"{BASE}/result" for x in m), timeout=60), daemon.log

    # the states go out with the first session (the daemon refreshes them within half a second of connecting)
    assert wait_for(lambda: f"{BASE}/line/gate/totals" in retained_now(broker), 10), daemon.log
    before_any = retained_now(broker)
    assert not any(m.topic == f"{BASE}/events" for m in watcher.messages)  # no object yet, and already:
    assert before_any[f"{BASE}/count/face"] == before_any[f"{BASE}/count/all"] == b"0"
    assert before_any[f"{BASE}/zone/middle/occupied"] == before_any[f"{BASE}/zone/corner/occupied"] == b"OFF"
    assert json.loads(before_any[f"{BASE}/line/gate/totals"])["by_label"] == {"face": {"in": 0, "out": 0}}

    broker.publish(f"{BASE}/zone/corner/occupied", b"", retain=True)  # the broker forgets it: only the box knows
    broker.stop()
    down_at = time.time()
    time.sleep(4.0)  # the face comes in meanwhile: its new event goes to the spool
    broker.restart()
    up_at = time.time()
    assert wait_for(lambda: retained_now(broker).get(f"{BASE}/zone/corner/occupied") == b"OFF", 20), daemon.log

    assert daemon.wait(120) == 0, daemon.log
    assert "every result reached the broker" in daemon.log
    ended = lambda m: any(e["type"] == "end" for e in valid(m, f"{BASE}/events", "event"))  # noqa: E731
    assert watcher.wait_until(ended, timeout=10), daemon.log
    events = valid(list(watcher.messages), f"{BASE}/events", "event")
    kinds = [event["type"] for event in events]
    assert kinds[0] == "new" and kinds[-1] == "end" and len({event["after"]["id"] for event in events}) == 1
    assert down_at < events[0]["after"]["frame_time"] < up_at  # told while the broker was away
    [crossing] = valid(list(watcher.messages), f"{BASE}/line/gate", "crossing")
    assert crossing["direction"] == LATE_WALK.crossing() and down_at < crossing["time"]


# reloads: what a pipeline no longer has leaves the broker


def test_a_reload_clears_the_retained_states_a_pipeline_no_longer_has(
    mosquitto: Mosquitto,
    astronaut_bgr: np.ndarray,
    tmp_path: Path,
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    empty = render(tmp_path / "empty.avi", astronaut_bgr, [], 20)
    looping = {"type": "file", "path": str(empty), "realtime": True, "loop": True}
    yard = {"polygon": [[0.0, 0.5], [1.0, 0.5], [1.0, 1.0], [0.0, 1.0]]}
    snapshots = {"snapshot": {"enabled": True, "max_rate_hz": 5}}  # retained by the publisher, not as a state
    first = {"name": "faces", "source": looping, "model": {"path": str(FACE_MODEL)}, "track": TRACK,
             "publish": snapshots}  # fmt: skip
    config = write_config(mosquitto, [first | {"zones": {"yard": yard}}])
    daemon = run_daemon(config)
    assert wait_for(lambda: f"{BASE}/zone/yard/occupied" in retained_now(mosquitto), 60), daemon.log
    assert wait_for(lambda: f"{BASE}/snapshot" in retained_now(mosquitto), 30), daemon.log

    write_config(mosquitto, [first | {"zones": {"porch": yard}}])  # the zone renamed: the pipeline changed
    daemon.signal(signal.SIGHUP)
    assert wait_for(lambda: f"{BASE}/zone/porch/occupied" in retained_now(mosquitto), 60), daemon.log
    held = retained_now(mosquitto)
    assert not any("/zone/yard/" in topic for topic in held) and f"{BASE}/model" in held
    assert held[f"{BASE}/count/face"] == b"0"

    door = first | {"name": "door"}
    write_config(mosquitto, [door])  # the pipeline removed, another added
    daemon.signal(signal.SIGHUP)
    assert wait_for(lambda: "edge/test-box/door/model" in retained_now(mosquitto, "edge/test-box/#"), 60), daemon.log
    assert wait_for(lambda: retained_now(mosquitto) == {}, 10), daemon.log
    assert daemon.stop() == 0


def test_a_box_whose_clip_ends_while_the_broker_is_away_leaves_nobody_in_the_zone_once_it_is_back(
    persistent_broker: Mosquitto,
    astronaut_bgr: np.ndarray,
    tmp_path: Path,
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    """The stale occupancy Frigate's users met: the face stands in the zone when the broker goes, the source
    ends meanwhile, and the broker must not be left holding `ON` once it is back."""
    broker = persistent_broker
    standing = Walk(0, [20 * i for i in range(12)] + [220] * 48, TOP)  # into the middle zone, then it stays
    clip = render(tmp_path / "standing.avi", astronaut_bgr, [standing], 60)
    daemon = run_daemon(write_config(broker, [objects_pipeline(clip)]), exit_when_done=True)
    occupied = f"{BASE}/zone/middle/occupied"
    assert wait_for(lambda: retained_now(broker, occupied).get(occupied) == b"ON", 60), daemon.log
    broker.stop()
    assert wait_for(lambda: "every source has ended" in daemon.log, 30), daemon.log
    broker.restart()
    assert daemon.wait(60) == 0, daemon.log
    final = retained_now(broker)
    assert final[occupied] == b"OFF" and final[f"{BASE}/count/face"] == final[f"{BASE}/zone/middle/count/all"] == b"0"
