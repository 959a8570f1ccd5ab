"""What a camera pipeline publishes about its objects, from real tracker updates: a person made up in the test
walks down the picture, across a line and into a zone, and leaves. Every message is checked against its schema."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import cv2
import jsonschema
import numpy as np
import pytest
from recorders import RecordingSink

from edge_runtime.config.schema import PipelineConfig
from edge_runtime.decoders.decoded import Detection, Detections
from edge_runtime.mqtt.topics import Topics
from edge_runtime.pipeline.build import object_outputs_for
from edge_runtime.pipeline.object_outputs import EVENT_QOS, PICTURE_QOS, ObjectOutputs
from edge_runtime.pipeline.objects import ObjectStage
from edge_runtime.pipeline.results import result_schema
from edge_runtime.sources.base import Frame
from edge_runtime.tracking import TrackConfig
from edge_runtime.tracking.events import EventsConfig
from edge_runtime.tracking.lines import LineConfig
from edge_runtime.tracking.zones import ZoneConfig

TOPICS = Topics("edge", "box")
BASE = "edge/box/cam"
STEP_S = 0.1
LOWER_HALF = [(0.0, 0.5), (1.0, 0.5), (1.0, 1.0), (0.0, 1.0)]
ZONES = {"yard": ZoneConfig(polygon=LOWER_HALF)}
LINES = {"gate": LineConfig(points=[(0.2, 0.5), (0.8, 0.5)], inbound="right")}  # below the line is in
TRACK = TrackConfig(lost_after_s=0.3)


def schema(name: str) -> jsonschema.Draft202012Validator:
    text = resources.files("edge_runtime.schemas").joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    return jsonschema.Draft202012Validator(json.loads(text), format_checker=jsonschema.FormatChecker())


SCHEMAS = {name: schema(name) for name in ("event", "crossing", "totals")}


@dataclass
class Retained:
    """The retained states put, in order, as the daemon's RetainedStates would take them."""

    puts: list[tuple[str, bytes]] = field(default_factory=list)
    broken: bool = False  # each put raises, as a connection refusing a message would

    def __call__(self, topic: str, payload: bytes) -> None:
        if self.broken:
            raise OSError("connection refused the message")
        self.puts.append((topic, payload))

    def latest(self) -> dict[str, bytes]:
        return dict(self.puts)

    def values(self, topic: str) -> list[bytes]:
        return [payload for put_topic, payload in self.puts if put_topic == topic]


@dataclass
class Run:
    outputs: ObjectOutputs
    stage: ObjectStage
    sink: RecordingSink
    retained: Retained
    marked: list[Detections] = field(default_factory=list)
    errors: list[int] = field(default_factory=list)

    def frame(self, step: int, *boxes: tuple[float, float, float, float]) -> Detections:
        image = np.full((480, 640, 3), 90, np.uint8)
        for x_min, y_min, x_max, y_max in boxes:
            cv2.rectangle(image, (int(x_min), int(y_min)), (int(x_max), int(y_max)), (40, 160, 220), cv2.FILLED)
        detections = Detections(tuple(Detection("person", 0.9, box) for box in boxes))
        marked = self.stage.on_frame(Frame(image, step, 1000.0 + step * STEP_S, "cam"), detections)
        self.marked.append(marked)
        return marked

    def events(self) -> list[dict[str, Any]]:
        found = []
        for _, payload, qos, retain in self.sink.on(f"{BASE}/events"):
            assert (qos, retain) == (EVENT_QOS, False)
            message = json.loads(payload)
            SCHEMAS["event"].validate(message)
            found.append(message)
        return found

    def crossings(self) -> list[dict[str, Any]]:
        found = []
        for _, payload, qos, retain in self.sink.on(f"{BASE}/line/gate"):
            assert (qos, retain) == (EVENT_QOS, False)
            found.append(json.loads(payload))
            SCHEMAS["crossing"].validate(found[-1])
        return found


def started(
    zones: dict[str, ZoneConfig] | None = None,
    lines: dict[str, LineConfig] | None = None,
    events: EventsConfig | None = None,
) -> Run:
    sink, retained = RecordingSink(), Retained()
    outputs = ObjectOutputs(
        pipeline="cam",
        topics=TOPICS,
        sink=sink,
        retained=retained,
        labels=["person"],
        zones=ZONES if zones is None else zones,
        lines=LINES if lines is None else lines,
        events=events,
        clock=lambda: 999.0,
    )
    errors: list[int] = []
    zones_of = outputs.zones_of if outputs.zones is not None else None
    stage = ObjectStage(TRACK, [outputs], on_error=lambda: errors.append(1), zones_of=zones_of)
    stage.start()
    return Run(outputs, stage, sink, retained, errors=errors)


def walker(step: int) -> tuple[float, float, float, float]:
    """A person 60x160 px walking down the picture 20 px a frame: feet at 120 px at step 0, the line (240 px)
    passed between steps 6 and 7, the lowest at step 15 (feet at 420 px)."""
    feet = 120.0 + 20.0 * step
    return (290.0, feet - 160.0, 350.0, feet)


def walk(run: Run, steps: int = 16) -> None:
    for step in range(steps):
        run.frame(step, walker(step))


def test_before_any_frame_every_state_is_put_at_zero_and_off() -> None:
    run = started()
    assert run.retained.latest() == {
        f"{BASE}/count/person": b"0",
        f"{BASE}/count/all": b"0",
        f"{BASE}/zone/yard/count/person": b"0",
        f"{BASE}/zone/yard/count/all": b"0",
        f"{BASE}/zone/yard/occupied": b"OFF",
        f"{BASE}/line/gate/totals": b'{"in":0,"out":0,"by_label":{"person":{"in":0,"out":0}},"since":999.0}',
    }
    assert run.sink.messages == []


def test_a_person_crossing_the_line_into_the_zone_is_counted_once_and_the_zone_follows_it() -> None:
    run = started()
    walk(run)
    [crossing] = run.crossings()
    ids = {d.track_id for found in run.marked for d in found.detections if d.track_id is not None}
    assert len(ids) == 1 and crossing["track_id"] in ids
    assert (crossing["direction"], crossing["label"], crossing["line"]) == ("in", "person", "gate")
    totals = json.loads(run.retained.latest()[f"{BASE}/line/gate/totals"])
    SCHEMAS["totals"].validate(totals)
    assert totals == {"in": 1, "out": 0, "by_label": {"person": {"in": 1, "out": 0}}, "since": 999.0}
    assert run.retained.values(f"{BASE}/zone/yard/occupied") == [b"OFF", b"ON"]
    assert run.retained.latest()[f"{BASE}/zone/yard/count/person"] == b"1"
    assert run.retained.values(f"{BASE}/count/person") == [b"0", b"1"]  # changes only, not every frame
    zones = [found.detections[0].zones for found in run.marked]
    # feet inside from step 6 (on the edge, 240 px); three frames inside (inertia 3) enter it at step 8
    assert zones[0] is None and zones[1:8] == [()] * 7 and zones[8:] == [("yard",)] * 8
    assert [found.detections[0].to_dict().get("zones") for found in run.marked[7:9]] == [[], ["yard"]]
    assert run.errors == []


def test_leaving_ends_the_object_and_puts_the_counts_back_to_zero() -> None:
    run = started(events=EventsConfig(snapshot={"enabled": False}))
    walk(run)
    for step in range(16, 21):  # gone: ended once lost_after_s has passed without it
        run.frame(step)
    events = run.events()
    assert events[0]["type"] == "new" and events[-1]["type"] == "end"
    assert {event["after"]["id"] for event in events} == {events[0]["after"]["id"]}
    assert [event["type"] for event in events].count("end") == 1
    assert events[-1]["after"]["entered_zones"] == ["yard"] and events[-1]["after"]["current_zones"] == []
    assert any(event["type"] == "update" and event["after"]["current_zones"] == ["yard"] for event in events)
    latest = run.retained.latest()
    assert latest[f"{BASE}/zone/yard/occupied"] == b"OFF" and latest[f"{BASE}/count/all"] == b"0"
    assert json.loads(latest[f"{BASE}/line/gate/totals"])["in"] == 1  # totals stay


def test_stopping_ends_open_events_and_leaves_nobody_counted() -> None:
    run = started(events=EventsConfig())
    walk(run)
    assert run.retained.latest()[f"{BASE}/zone/yard/occupied"] == b"ON"
    run.stage.stop()
    events = run.events()
    assert events[-1]["type"] == "end" and [event["type"] for event in events].count("end") == 1
    latest = run.retained.latest()
    assert latest[f"{BASE}/zone/yard/occupied"] == b"OFF" and latest[f"{BASE}/count/person"] == b"0"
    assert run.outputs.views is not None and len(run.outputs.views) == 0  # its kept view was freed


def test_an_event_s_pictures_go_best_effort_and_its_label_s_picture_is_retained() -> None:
    run = started(events=EventsConfig())
    walk(run)
    run.stage.stop()
    [event_id] = {event["after"]["id"] for event in run.events()}
    pictures = run.sink.on(f"{BASE}/events/{event_id}/snapshot")
    assert pictures and all((qos, retain) == (PICTURE_QOS, False) for _, _, qos, retain in pictures)
    shown = cv2.imdecode(np.frombuffer(pictures[-1][1], np.uint8), cv2.IMREAD_COLOR)
    assert shown.shape[0] == 270  # the snapshot settings' height
    assert np.abs(shown.astype(int) - (40, 160, 220)).sum(axis=2).min() < 40  # the person is in it
    label_pictures = run.retained.values(f"{BASE}/person/snapshot")
    assert label_pictures and cv2.imdecode(np.frombuffer(label_pictures[-1], np.uint8), cv2.IMREAD_COLOR) is not None
    # the same size and score all along: the first confirmed view stays the best (Frigate's rule)
    described = {json.dumps(event["after"]["snapshot"]) for event in run.events() if event["after"]["has_snapshot"]}
    assert [json.loads(view)["box"] for view in described] == [list(walker(1))]


def test_people_coming_and_going_leave_nothing_held_once_each_has_ended() -> None:
    """A box runs for months: every part that keeps state per object must let it go when the object ends."""
    run = started(events=EventsConfig())
    walks, step = 12, 0
    for _ in range(walks):
        for offset in range(16):
            run.frame(step, walker(offset))
            step += 1
        for _ in range(5):  # nobody: the person ends once lost_after_s has passed
            run.frame(step)
            step += 1
        outputs = run.outputs
        assert outputs.events is not None and outputs.zones is not None and outputs.lines is not None
        assert outputs.views is not None
        held = (len(run.stage.tracker), len(outputs.events), len(outputs.zones), len(outputs.lines), len(outputs.views))
        assert held == (0, 0, 0, 0, 0)
    types = [event["type"] for event in run.events()]
    assert types.count("new") == types.count("end") == walks
    assert len(run.crossings()) == walks and run.errors == []


def test_an_object_that_leaves_while_the_scene_is_still_ends_through_a_coast() -> None:
    run = started(events=EventsConfig(snapshot={"enabled": False}))
    walk(run)
    run.frame(16)  # it left: missing from here; no frame is analysed after this one
    last = 1000.0 + 16 * STEP_S
    assert run.stage.idle(last + 0.4) is None and run.events()[-1]["type"] != "end"  # not still for long enough
    assert run.stage.idle(last + 0.5) is not None
    assert run.events()[-1]["type"] == "end" and run.retained.latest()[f"{BASE}/zone/yard/occupied"] == b"OFF"
    assert run.errors == []


def test_a_person_walking_back_up_goes_out_through_the_line_and_out_of_the_zone() -> None:
    run = started()
    walk(run)
    for step in range(16, 32):  # back up the picture, as fast
        run.frame(step, walker(31 - step))
    assert [crossing["direction"] for crossing in run.crossings()] == ["in", "out"]
    totals = json.loads(run.retained.latest()[f"{BASE}/line/gate/totals"])
    assert (totals["in"], totals["out"]) == (1, 1)
    assert run.retained.values(f"{BASE}/zone/yard/occupied") == [b"OFF", b"ON", b"OFF"]
    assert run.marked[-1].detections[0].zones == ()


def test_lines_alone_mark_no_zones_on_detections_and_results_stay_valid() -> None:
    run = started(zones={})
    walk(run, 10)
    assert run.outputs.zones is None and run.outputs.zones_of("anything") is None
    assert all("zones" not in d.to_dict() for found in run.marked for d in found.detections)
    assert len(run.crossings()) == 1
    assert not any("zone" in topic for topic, _ in run.retained.puts)


def test_a_failing_publisher_is_counted_and_the_states_it_missed_are_put_once_it_works_again() -> None:
    """The broker-facing side fails while the person crosses the line and enters the zone: the stage counts
    the failures, the results still carry the object, and the whole state is put with the next frame."""
    run = started()
    walk(run, 6)
    run.retained.broken = True
    for step in range(6, 10):
        assert run.frame(step, walker(step)).detections[0].track_id is not None
    assert len(run.errors) >= 1 and run.retained.latest()[f"{BASE}/zone/yard/occupied"] == b"OFF"
    run.retained.broken = False
    run.frame(10, walker(10))
    latest = run.retained.latest()
    assert latest[f"{BASE}/zone/yard/occupied"] == b"ON" and latest[f"{BASE}/count/person"] == b"1"
    assert json.loads(latest[f"{BASE}/line/gate/totals"])["in"] == 1


def test_result_messages_with_zones_validate_against_the_result_schema() -> None:
    run = started()
    walk(run)
    for found in run.marked:
        message = {
            "schema_version": 2,
            "id": "5b1d7a7e-9a43-4f57-9a6b-6d7b8d0e4c11",
            "device_id": "box",
            "pipeline": "cam",
            "source": "test",
            "kind": "frame",
            "index": 0,
            "frame": {"width": 640, "height": 480},
            "captured_at": "2026-01-01T00:00:00.000Z",
            "published_at": "2026-01-01T00:00:00.010Z",
            "model": {"name": "m", "version": "1", "variant": "onnx/fp32"},
            "runtime": {"backend": "onnxruntime", "device": "CPU", "precision": "fp32"},
            "latency_ms": {"pre": 1.0, "infer": 1.0, "post": 1.0, "total": 3.0},
            "task": "detection",
            "result": found.to_dict(),
        }
        jsonschema.validate(message, result_schema())
    broken = {"label": "person", "score": 0.9, "box": [0, 0, 1, 1], "zones": ["yard"]}  # zones without a track id
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, result_schema()["properties"]["result"]["properties"]["detections"]["items"])


def test_a_pipeline_without_zones_lines_or_events_has_no_object_outputs() -> None:
    source = {"type": "file", "path": "clip.mp4"}
    plain = PipelineConfig.model_validate({"name": "cam", "source": source, "model": {"path": "m"}, "track": {}})
    sink, retained = RecordingSink(), Retained()
    assert object_outputs_for(plain, ["face"], TOPICS, sink, _Put(retained)) is None
    following = plain.model_copy(update={"lines": LINES})
    outputs = object_outputs_for(following, ["face", "hand"], TOPICS, sink, _Put(retained))
    assert outputs is not None and outputs.zones is None and outputs.events is None
    outputs.start()
    assert {f"{BASE}/count/face", f"{BASE}/count/hand"} <= set(retained.latest())  # every model label, at 0


@dataclass
class _Put:
    retained: Retained

    def put(self, topic: str, payload: bytes) -> None:
        self.retained(topic, payload)
