"""The objects stage: detections marked with their object's id, listeners told of every update, and objects
aged through frames the motion gate held back. First on detections made up in the test, then in real pipelines
running MediaPipe's face detector on clips of a real face, one of them played through a motion-gated file source.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import cv2
import jsonschema
import numpy as np
import pytest
from recorders import FramesOnce, RecordingSink, face_decoder

from edge_runtime.decoders.decoded import Detection, Detections
from edge_runtime.mqtt.topics import Topics
from edge_runtime.pipeline.objects import STILL_BEFORE_COAST_S, ObjectsSeen, ObjectStage, object_stage_for
from edge_runtime.pipeline.outputs import PublishPolicy
from edge_runtime.pipeline.results import result_schema
from edge_runtime.pipeline.streaming import Pipeline
from edge_runtime.placement.model import LoadedModel
from edge_runtime.sources import make_source
from edge_runtime.sources.base import Frame, Source
from edge_runtime.sources.configs import FileSourceConfig
from edge_runtime.tracking import TrackConfig

IMAGE = np.zeros((480, 640, 3), np.uint8)
BACKGROUND = 90


def frame_at(time_s: float, index: int = 0) -> Frame:
    return Frame(IMAGE, index, time_s, "camera")


def person(x: float, score: float = 0.9, label: str = "person") -> Detection:
    return Detection(label, score, (x, 100.0, x + 60.0, 260.0))


@dataclass
class Heard:
    """What a listener was told, in order."""

    seen: list[ObjectsSeen] = field(default_factory=list)

    def __call__(self, seen: ObjectsSeen) -> None:
        self.seen.append(seen)


# the stage, on detections made up here


def test_a_detection_is_marked_with_its_object_s_id_from_the_frame_that_confirms_it() -> None:
    stage = ObjectStage(TrackConfig())
    marked = [stage.on_frame(frame_at(i / 10), Detections((person(100.0 + 4 * i),))) for i in range(6)]
    ids = [found.detections[0].track_id for found in marked]
    assert ids[0] is None  # one frame is not a confirmed object
    assert ids[1] is not None and set(ids[1:]) == {ids[1]}
    assert [found.detections[0].stationary for found in marked[1:]] == [False] * 5
    assert marked[-1].detections[0].to_dict()["track_id"] == ids[1]


def test_detections_that_are_no_confirmed_object_are_passed_on_as_they_are() -> None:
    """Another label, a weak detection that can start no track: the same objects, in the same places."""
    stage = ObjectStage(TrackConfig(labels=["person"]))
    for i in range(3):
        frame = Detections((person(100.0 + 4 * i), person(400.0, label="car"), person(250.0, score=0.3)))
        marked = stage.on_frame(frame_at(i / 10), frame)
    assert marked.detections[0].track_id is not None
    assert marked.detections[1] is frame.detections[1] and marked.detections[2] is frame.detections[2]
    assert [d.to_dict() for d in marked.detections[1:]] == [d.to_dict() for d in frame.detections[1:]]


def test_a_frame_without_a_confirmed_object_is_handed_back_untouched() -> None:
    stage = ObjectStage(TrackConfig())
    frame = Detections((person(100.0),))
    assert stage.on_frame(frame_at(0.0), frame) is frame


def test_an_object_whose_scores_never_reach_its_threshold_is_never_marked() -> None:
    """0.65 starts a track (new_track 0.6) but its median stays below the filter's threshold (0.7)."""
    heard = Heard()
    stage = ObjectStage(TrackConfig(), [heard])
    marked = [stage.on_frame(frame_at(i / 10), Detections((person(100.0, 0.65),))) for i in range(10)]
    assert all(found.detections[0].track_id is None for found in marked)
    assert len(stage.tracker) == 1 and all(seen.update.objects == () for seen in heard.seen)


def test_an_object_that_stays_in_place_is_flagged_stationary_after_stationary_after_s() -> None:
    stage = ObjectStage(TrackConfig(stationary_after_s=2.0))
    flags = {
        t / 2: stage.on_frame(frame_at(t / 2), Detections((person(100.0),))).detections[0].stationary for t in range(8)
    }
    assert [time_s for time_s, still in flags.items() if still] == [2.0, 2.5, 3.0, 3.5]
    assert flags[1.5] is False


def test_listeners_hear_every_update_in_order_and_one_that_fails_does_not_stop_the_next() -> None:
    failures = []

    def broken(seen: ObjectsSeen) -> None:
        raise RuntimeError("zone file gone")

    heard = Heard()
    stage = ObjectStage(TrackConfig(), [broken, heard], on_error=lambda: failures.append(1))
    frames = [frame_at(i / 10, i) for i in range(3)]
    marked = [stage.on_frame(frame, Detections((person(100.0 + 4 * i),))) for i, frame in enumerate(frames)]
    assert [seen.frame for seen in heard.seen] == frames
    assert [seen.detections for seen in heard.seen] == [found.detections for found in marked]
    assert [seen.update.timestamp for seen in heard.seen] == [0.0, 0.1, 0.2]
    assert [len(seen.update.objects) for seen in heard.seen] == [0, 1, 1]
    assert len(failures) == 3


@dataclass
class Lifecycle(Heard):
    """A listener that also hears the pipeline start and stop."""

    steps: list[str] = field(default_factory=list)
    broken_start: bool = False

    def start(self) -> None:
        self.steps.append("start")
        if self.broken_start:
            raise RuntimeError("broker refused the first state")

    def stop(self) -> None:
        self.steps.append("stop")


def test_listeners_with_start_and_stop_hear_them_and_one_failing_does_not_stop_the_next() -> None:
    failures = []
    first, second, plain = Lifecycle(broken_start=True), Lifecycle(), Heard()
    stage = ObjectStage(TrackConfig(), [first, plain, second], on_error=lambda: failures.append(1))
    stage.start()
    stage.on_frame(frame_at(0.0), Detections((person(100.0),)))
    stage.stop()
    assert first.steps == second.steps == ["start", "stop"] and len(failures) == 1
    assert [len(heard.seen) for heard in (first, plain, second)] == [1, 1, 1]


def test_with_zones_of_each_object_s_detection_names_its_zones_once_the_listeners_placed_it() -> None:
    """Only detections of confirmed objects whose zones are known get them; the others are left as they are."""
    placed: dict[str, tuple[str, ...]] = {}

    def place_first(seen: ObjectsSeen) -> None:
        placed.clear()
        placed.update({obj.id: ("yard",) for obj in seen.update.objects[:1]})

    stage = ObjectStage(TrackConfig(), [place_first], zones_of=placed.get)
    for i in range(3):
        frame = Detections((person(100.0 + 4 * i), person(400.0 - 4 * i), person(250.0, score=0.3)))
        marked = stage.on_frame(frame_at(i / 10), frame)
    first, second, weak = marked.detections
    assert first.zones == ("yard",) and first.to_dict()["zones"] == ["yard"]
    assert second.track_id is not None and second.zones is None and "zones" not in second.to_dict()
    assert weak is frame.detections[2]


def test_no_stage_without_a_track_section_or_with_it_disabled() -> None:
    assert object_stage_for(None) is None
    assert object_stage_for(TrackConfig(enabled=False)) is None
    assert isinstance(object_stage_for(TrackConfig()), ObjectStage)


def test_idle_coasts_only_once_the_scene_has_been_still_and_ends_a_missing_object_on_time() -> None:
    heard = Heard()
    stage = ObjectStage(TrackConfig(lost_after_s=1.0), [heard])
    for i in range(3):
        stage.on_frame(frame_at(i / 10), Detections((person(100.0 + 4 * i),)))
    stage.on_frame(frame_at(0.3), Detections())  # it left: missing from 0.3 s
    [gone] = heard.seen[-1].update.objects
    assert stage.idle(None) is None  # nothing held back
    assert stage.idle(0.3 + STILL_BEFORE_COAST_S - 0.01) is None  # not still for long enough yet
    coasted = stage.idle(0.8)
    assert coasted is not None and coasted.ended == () and [o.id for o in coasted.objects] == [gone.id]
    assert stage.idle(0.8) is None  # no newer frame held back: nothing to say
    still_there = stage.idle(1.29)
    assert still_there is not None and still_there.ended == ()
    ended = stage.idle(1.3)
    assert ended is not None and [o.id for o in ended.ended] == [gone.id] and ended.objects == ()
    assert heard.seen[-1] == ObjectsSeen(ended, None, ())


def test_an_object_present_when_the_scene_went_still_does_not_age_however_long_it_stays() -> None:
    stage = ObjectStage(TrackConfig(lost_after_s=1.0))
    for i in range(3):
        marked = stage.on_frame(frame_at(i / 10), Detections((person(100.0),)))
    parked = marked.detections[0].track_id
    for held_at in (1.0, 10.0, 100.0, 600.0):
        update = stage.idle(held_at)
        assert update is not None and update.ended == () and [o.id for o in update.objects] == [parked]
    assert stage.on_frame(frame_at(601.0), Detections((person(101.0),))).detections[0].track_id == parked


# real pipelines, with the face detector


def face_crop(astronaut_bgr: np.ndarray) -> np.ndarray:
    """The astronaut's head and shoulders, 260 px square: the detector finds the face at about 0.8."""
    return np.ascontiguousarray(astronaut_bgr[40:300, 120:380])


def place(frame: np.ndarray, crop: np.ndarray, x: int) -> np.ndarray:
    """`frame` with the crop's left edge at `x`, 100 px from the top, cut off where it passes the right edge."""
    width = min(crop.shape[1], frame.shape[1] - x)
    if width > 0:
        frame[100 : 100 + crop.shape[0], x : x + width] = crop[:, :width]
    return frame


def scene(crop: np.ndarray | None, x: int = 0) -> np.ndarray:
    """The crop at `x` on a flat grey 640x480 frame; without a crop, the empty scene."""
    frame = np.full((480, 640, 3), BACKGROUND, np.uint8)
    return frame if crop is None else place(frame, crop, x)


def run_pipeline(
    model: LoadedModel,
    source: Source,
    track: TrackConfig | None,
    policy: PublishPolicy | None = None,
    listeners: Sequence[Heard] = (),
    timeout: float = 30.0,
) -> tuple[Pipeline, RecordingSink]:
    sink = RecordingSink()
    pipeline = Pipeline(
        name="faces",
        topics=Topics("edge", "box"),
        source=source,
        model=model,
        decoder=face_decoder(model),
        input_spec=model.input_specs[0],
        policy=policy or PublishPolicy(),
        sink=sink,
        track=track,
        object_listeners=listeners,
    )
    pipeline.start()
    assert pipeline.finished.wait(timeout)
    pipeline.stop()
    return pipeline, sink


def test_a_face_moving_across_a_clip_keeps_one_track_id_and_without_track_the_messages_are_as_before(
    face_model: LoadedModel, astronaut_bgr: np.ndarray
) -> None:
    crop = face_crop(astronaut_bgr)
    clip = [scene(crop, 12 * i) for i in range(20)]  # 10 fps: 120 px a second, 1.4 frame widths of its face
    tracked_pipeline, tracked = run_pipeline(face_model, FramesOnce(clip, interval_s=0.1), TrackConfig())
    untracked_pipeline, untracked = run_pipeline(face_model, FramesOnce(clip, interval_s=0.1), None)
    assert tracked_pipeline.objects is not None and untracked_pipeline.objects is None

    faces = [message["result"]["detections"] for message in tracked.results()]
    assert [len(found) for found in faces] == [1] * 20
    assert "track_id" not in faces[0][0]  # not confirmed before its second frame
    ids = {found[0]["track_id"] for found in faces[1:]}
    assert len(ids) == 1 and all(found[0]["stationary"] is False for found in faces[1:])
    for message in tracked.results():
        jsonschema.validate(message, result_schema())

    plain = [message["result"]["detections"] for message in untracked.results()]
    assert all(set(found[0]) == {"label", "score", "box", "keypoints"} for found in plain)
    without_tracking = [[{k: v for k, v in d.items() if k not in ("track_id", "stationary")} for d in f] for f in faces]
    assert without_tracking == plain  # tracking only added keys


def test_the_tracker_follows_faces_the_score_threshold_keeps_out_of_the_results(
    face_model: LoadedModel, astronaut_bgr: np.ndarray
) -> None:
    """A faded face scores about 0.65, below publish.min_score but within what the tracker takes."""
    crop = face_crop(astronaut_bgr)
    faded = (crop * 0.15 + 0.85 * 110).astype(np.uint8)
    clip = [place(scene(crop, 20 + 4 * i), faded, 360 + 4 * i) for i in range(6)]
    heard = Heard()
    track = TrackConfig.model_validate({"filters": {"default": {"threshold": 0.6}}})
    _, sink = run_pipeline(face_model, FramesOnce(clip, 0.1), track, PublishPolicy(min_score=0.72), [heard])

    published = [d for message in sink.results() for d in message["result"]["detections"]]
    assert published and all(d["score"] >= 0.72 and d["box"][0] < 300 for d in published)
    followed = {o.id: o for seen in heard.seen for o in seen.update.objects}
    assert len(followed) == 2  # both faces are objects
    [faded_id] = [object_id for object_id, o in followed.items() if o.box[0] > 300]
    assert followed[faded_id].score < 0.72
    assert faded_id not in {d.get("track_id") for d in published}


# a real motion-gated source

FPS = 20
LOST_AFTER_S = 0.6


@dataclass(frozen=True)
class GatedRun:
    heard: list[ObjectsSeen]
    results: list[dict[str, object]]
    dropped: int


@pytest.fixture(scope="module")
def gated_run(
    face_model: LoadedModel, astronaut_bgr: np.ndarray, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatedRun]:
    """A 6 s clip played in real time through a file source whose motion gate lets no still frame through: a face
    moves in (0.6 s), stands still (2 s), walks out of the picture (0.8 s), and the empty scene stays still (2.6 s)."""
    crop = face_crop(astronaut_bgr)
    positions = [12 * i for i in range(12)] + [132] * 40 + [132 + 25 * i for i in range(1, 17)]
    frames = [scene(crop, x) for x in positions] + [scene(None)] * 52
    path = tmp_path_factory.mktemp("gated") / "walk.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), FPS, (640, 480))
    assert writer.isOpened()
    for frame in frames:
        writer.write(frame)
    writer.release()

    config = FileSourceConfig.model_validate(
        {"type": "file", "path": path, "realtime": True, "motion": {"keepalive_s": None}}
    )
    source = make_source(config, "walk")
    heard = Heard()
    _, sink = run_pipeline(face_model, source, TrackConfig(lost_after_s=LOST_AFTER_S), listeners=[heard], timeout=60)
    yield GatedRun(heard.seen, sink.results(), source.stats.dropped)


def test_a_face_that_stands_still_keeps_its_id_while_the_gate_holds_every_frame(gated_run: GatedRun) -> None:
    ids = {d["track_id"] for m in gated_run.results for d in m["result"]["detections"] if "track_id" in d}  # type: ignore[index, attr-defined]
    assert len(ids) == 1
    [face] = ids
    analysed = [seen.update.timestamp for seen in gated_run.heard if seen.frame is not None]
    assert max(np.diff(analysed)) > LOST_AFTER_S + 0.3  # the gate held frames for longer than lost_after_s
    assert gated_run.dropped > 40
    coasts_with_it = [s for s in gated_run.heard if s.frame is None and any(o.id == face for o in s.update.objects)]
    assert coasts_with_it  # it was there, unaged, while nothing was analysed
    [end] = [s for s in gated_run.heard if s.update.ended]
    assert max(s.update.timestamp for s in coasts_with_it) < end.update.timestamp


def test_a_face_that_left_before_the_scene_went_still_ends_on_time_while_the_gate_holds_every_frame(
    gated_run: GatedRun,
) -> None:
    [end] = [s for s in gated_run.heard if s.update.ended]
    assert end.frame is None  # ended by a coast: no frame was analysed
    [gone] = end.update.ended
    late_by = end.update.timestamp - gone.last_seen - LOST_AFTER_S
    assert 0.0 <= late_by <= 1.0, late_by
    last_analysed = max(s.update.timestamp for s in gated_run.heard if s.frame is not None)
    assert end.update.timestamp > last_analysed  # the gate held every frame after it
