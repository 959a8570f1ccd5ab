"""The cascade stage with real models: MediaPipe's face detector finds the astronaut's face in the bundled clip,
MediaPipe's face landmark model runs on its crop, and the landmarks come back in frame pixels.

Tolerances: a landmark is compared with the landmark model run directly on the same crop. Run one crop at a
time the computation is the same, so the points agree to float rounding; run as a batch, the backend may pick
other kernels for the larger shape, which sum in another order: their float32 rounding moves a point by far
less than the 0.1 px that result messages round positions to, so 0.05 px (half of that) is the bound.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest

from edge_runtime.config.cascade import CascadeStageConfig
from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.decoded import Detection, Detections, Keypoint, Keypoints, SubLabel
from edge_runtime.package.loader import open_package
from edge_runtime.pipeline.build import decoder_of
from edge_runtime.pipeline.cascade import Cascade, CascadeStage, crop_region
from edge_runtime.pipeline.objects import ObjectStage
from edge_runtime.pipeline.preprocess import preprocessor_for
from edge_runtime.placement.model import LoadedModel, load_model
from edge_runtime.sources.base import Frame
from edge_runtime.tracking.config import TrackConfig

REPO = Path(__file__).resolve().parents[2]
LANDMARK_PACKAGE = REPO / "samples" / "models" / "face_landmark"
CLIP = REPO / "samples" / "videos" / "astronaut.mp4"
BATCH_TOLERANCE_PX = 0.05


@pytest.fixture(scope="module")
def landmarks() -> Iterator[LoadedModel]:
    model = load_model(open_package(LANDMARK_PACKAGE), "tflite/fp32", "litert", {"max_in_flight": 2})
    yield model
    model.close()


@pytest.fixture(scope="module")
def landmarks_batched() -> Iterator[LoadedModel]:
    model = load_model(open_package(LANDMARK_PACKAGE), "tflite/fp32", "litert", {"dynamic_batch": True})
    yield model
    model.close()


@pytest.fixture(scope="module")
def clip_frames() -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(CLIP))
    frames = []
    while len(frames) < 40:
        ok, image = capture.read()
        if not ok:
            break
        frames.append(image)
    capture.release()
    assert len(frames) == 40
    return frames


def detect(face_model: LoadedModel, image: np.ndarray) -> Detections:
    tensor, transform = preprocessor_for(face_model.input_specs[0], face_model.inputs[0])(image)
    decoded = decoder_of(face_model).decode(face_model.infer([tensor]), face_model.outputs, transform)
    assert isinstance(decoded, Detections)
    return decoded


def stage_config(**fields: object) -> CascadeStageConfig:
    return CascadeStageConfig.model_validate(
        {"name": "landmarks", "model": {"path": str(LANDMARK_PACKAGE)}, "labels": ["face"], "padding": 0.25} | fields
    )


def direct(model: LoadedModel, image: np.ndarray, box: tuple[float, float, float, float]) -> list[tuple[float, float]]:
    """The landmark model run by hand on the crop the stage should cut: points in frame pixels."""
    height, width = image.shape[:2]
    left, top, right, bottom = crop_region(box, 0.25, width, height)
    tensor, transform = preprocessor_for(model.input_specs[0], model.inputs[0])(image[top:bottom, left:right])
    decoded = decoder_of(model).decode(model.infer([tensor]), model.outputs, transform)
    assert isinstance(decoded, Keypoints)
    return [(point.x + left, point.y + top) for point in decoded.keypoints]


def points_of(detection: Detection, stage: str = "landmarks") -> list[Keypoint]:
    attributes = dict(detection.attributes)
    found = attributes[stage]
    assert isinstance(found, tuple)
    return list(found)


def test_crop_region_pads_each_side_rounds_outwards_and_clips_to_the_frame() -> None:
    assert crop_region((100.0, 50.0, 200.0, 150.0), 0.25, 640, 480) == (75, 25, 225, 175)
    assert crop_region((10.5, 10.5, 20.2, 20.2), 0.0, 640, 480) == (10, 10, 21, 21)
    assert crop_region((0.0, 400.0, 100.0, 480.0), 0.5, 640, 480) == (0, 360, 150, 480)


def test_landmarks_are_attached_in_frame_pixels_equal_to_the_model_run_on_the_same_crop(
    face_model: LoadedModel, landmarks: LoadedModel, clip_frames: list[np.ndarray]
) -> None:
    stage = CascadeStage(stage_config(), landmarks, decoder_of(landmarks))
    try:
        for index in (0, 15, 30):
            image = clip_frames[index]
            found = detect(face_model, image)
            [face] = found.detections
            [marked] = Cascade([stage]).on_frame(Frame(image, index, float(index), "clip"), found).detections
            points = points_of(marked)
            assert len(points) == 468
            expected = direct(landmarks, image, face.box)
            assert np.allclose([(p.x, p.y) for p in points], expected, atol=1e-3)
            # on the face: the mesh's points lie around the detector's box, not at the crop's origin
            xs, ys = np.array([p.x for p in points]), np.array([p.y for p in points])
            x_min, y_min, x_max, y_max = face.box
            assert x_min - 20 < np.median(xs) < x_max + 20 and y_min - 20 < np.median(ys) < y_max + 20
            assert all(p.in_frame for p in points)
            assert marked.to_dict()["attributes"]["landmarks"][0]["x"] == round(points[0].x, 1)
    finally:
        stage.close()


def test_crops_run_as_one_batch_give_each_face_the_landmarks_it_gets_alone(
    face_model: LoadedModel,
    landmarks: LoadedModel,
    landmarks_batched: LoadedModel,
    clip_frames: list[np.ndarray],
) -> None:
    """Four faces in one frame: four of the clip's frames in a 2x2 mosaic, so the four crops differ; each face
    found in its own frame (the short-range detector is made for faces filling much of its input)."""
    quadrants = [(clip_frames[i], x, y) for i, x, y in ((0, 0, 0), (8, 640, 0), (20, 0, 480), (28, 640, 480))]
    mosaic = np.vstack([np.hstack([quadrants[0][0], quadrants[1][0]]), np.hstack([quadrants[2][0], quadrants[3][0]])])
    faces = []
    for image, dx, dy in quadrants:
        [face] = detect(face_model, image).detections
        x_min, y_min, x_max, y_max = face.box
        faces.append(Detection("face", face.score, (x_min + dx, y_min + dy, x_max + dx, y_max + dy)))
    found = Detections(tuple(faces))
    frame = Frame(mosaic, 0, 0.0, "mosaic")
    batched = CascadeStage(stage_config(), landmarks, decoder_of(landmarks), batched=landmarks_batched)
    alone = CascadeStage(stage_config(), landmarks, decoder_of(landmarks))
    try:
        together = Cascade([batched]).on_frame(frame, found).detections
        one_by_one = Cascade([alone]).on_frame(frame, found).detections
    finally:
        batched.close()
        alone.close()
    for joined, single, face in zip(together, one_by_one, found.detections, strict=True):
        a = np.array([(p.x, p.y) for p in points_of(joined)])
        b = np.array([(p.x, p.y) for p in points_of(single)])
        assert np.abs(a - b).max() <= BATCH_TOLERANCE_PX
        assert np.abs(b - np.array(direct(landmarks, mosaic, face.box))).max() < 1e-3
    assert batched.counts.run == alone.counts.run == 4


def test_without_tracking_only_the_stage_labels_big_enough_boxes_and_the_best_max_crops_are_cropped(
    landmarks: LoadedModel, clip_frames: list[np.ndarray]
) -> None:
    image = clip_frames[0]
    faces = [Detection("face", 0.9 - i * 0.01, (300.0 + i, 150.0, 380.0 + i, 240.0)) for i in range(6)]
    others = [Detection("hand", 0.99, (300.0, 150.0, 380.0, 240.0)), Detection("face", 0.95, (10.0, 10.0, 20.0, 20.0))]
    decoded = Detections((*others, *faces))
    stage = CascadeStage(stage_config(max_crops=4, min_width=40, min_height=40), landmarks, decoder_of(landmarks))
    try:
        result = Cascade([stage]).on_frame(Frame(image, 0, 0.0, "clip"), decoded).detections
    finally:
        stage.close()
    with_points = [i for i, d in enumerate(result) if d.attributes]
    assert with_points == [2, 3, 4, 5]  # the four best faces; not the hand, not the 10 px face, not the two weakest
    assert stage.counts.run == 4


def test_a_crop_that_cannot_be_preprocessed_is_counted_and_skipped_and_the_rest_still_run(
    landmarks: LoadedModel, clip_frames: list[np.ndarray]
) -> None:
    image = clip_frames[0]
    outside = Detection("face", 0.99, (640.0, 100.0, 700.0, 160.0))  # beyond the frame's right edge: no pixel
    endless = Detection("face", 0.98, (10.0, 10.0, float("inf"), 90.0))  # a box no decoder should give
    nan = Detection("face", 0.97, (float("nan"), 10.0, 50.0, 90.0))  # not a size at all: not even a candidate
    inside = Detection("face", 0.9, (280.0, 140.0, 380.0, 260.0))
    reports: list[tuple[int, int]] = []
    stage = CascadeStage(stage_config(padding=0.0), landmarks, decoder_of(landmarks))
    cascade = Cascade([stage])
    cascade.report_to(lambda run, failed: reports.append((run, failed)))
    try:
        result = cascade.on_frame(Frame(image, 0, 0.0, "clip"), Detections((outside, endless, nan, inside))).detections
    finally:
        stage.close()
    assert not any(d.attributes for d in result[:3]) and len(points_of(result[3])) == 468
    assert (stage.counts.run, stage.counts.failed) == (1, 2)
    assert reports == [(1, 2)]


def test_with_tracking_a_stage_runs_per_object_when_due_not_per_frame_and_forgets_objects_that_end(
    face_model: LoadedModel, landmarks: LoadedModel, clip_frames: list[np.ndarray]
) -> None:
    """The clip's face at 10 frames a second for 3 s, re-inference every second and on 20 % growth: the face's
    size barely changes as it pans, so its crop runs at 0, 1 and 2 s, and landmarks are on those frames only."""
    stage = CascadeStage(
        stage_config(reinfer={"interval_s": 1.0, "area_growth": 0.2}),
        landmarks,
        decoder_of(landmarks),
        tracked=True,
    )
    track = TrackConfig.model_validate({"labels": ["face"], "confirm_hits": 1, "lost_after_s": 0.3})
    objects = ObjectStage(track, cascade=Cascade([stage]))
    with_points, tracked = [], []
    try:
        for index in range(30):
            image = clip_frames[index]
            marked = objects.on_frame(Frame(image, index, index * 0.1, "clip"), detect(face_model, image))
            if any(d.attributes for d in marked.detections):
                with_points.append(index)
            if any(d.track_id for d in marked.detections):
                tracked.append(index)
        assert len(stage.reinfer) == 1
        objects.on_frame(Frame(clip_frames[0] * 0, 30, 3.0, "clip"), Detections())
        objects.on_frame(Frame(clip_frames[0] * 0, 31, 3.5, "clip"), Detections())  # past lost_after_s: it ended
    finally:
        stage.close()
    first = tracked[0]  # the tracker confirms the face on its first frames; the stage runs on objects only
    assert first <= 2 and tracked == list(range(first, 30))
    assert with_points == [first, first + 10, first + 20]
    assert stage.counts.run == 3
    assert len(stage.reinfer) == 0


def test_with_tracking_a_classifier_gives_a_sub_label_by_consensus_announced_once_then_kept_on_every_frame(
    face_model: LoadedModel, clip_frames: list[np.ndarray], tiny_onnx: Path
) -> None:
    """A small CNN as the classifier: what it answers does not matter, only that one face's crops give it one
    top class frame after frame, so the consensus settles on it after min_attempts attempts."""
    classifier = load_model(open_package(tiny_onnx), "onnx/fp32", "onnxruntime", {})
    labels = tuple(f"person-{i}" for i in range(10))
    config = CascadeStageConfig.model_validate(
        {
            "name": "who",
            "model": {"path": str(tiny_onnx)},
            "labels": ["face"],
            "attach": "sub_label",
            "reinfer": {"interval_s": 0.25},
            "consensus": {"min_attempts": 3, "min_agreement": 0.6, "min_score": 0.0},
        }
    )
    stage = CascadeStage(config, classifier, make_decoder("classification", {}, labels), tracked=True)
    announced: list[tuple[str, str, str, SubLabel, float]] = []
    cascade = Cascade([stage], lambda *told: announced.append(told))
    objects = ObjectStage(TrackConfig.model_validate({"labels": ["face"], "confirm_hits": 1}), cascade=cascade)
    sub_labels, tracked = [], []
    try:
        for index in range(20):
            image = clip_frames[index]
            [face] = objects.on_frame(Frame(image, index, index * 0.1, "clip"), detect(face_model, image)).detections
            sub_labels.append(face.sub_label)
            if face.track_id is not None:
                tracked.append(index)
    finally:
        stage.close()
        classifier.close()
    assert len(announced) == 1
    object_id, label, stage_name, sub_label, at = announced[0]
    assert (label, stage_name) == ("face", "who") and sub_label.label in labels
    settled = next(i for i, given in enumerate(sub_labels) if given is not None)
    first = tracked[0]
    assert settled == first + 6  # attempts 0.25 s apart at 10 fps: 3 frames apart; the third settles it
    assert at == pytest.approx(settled * 0.1)
    assert all(given is not None and given.label == sub_label.label for given in sub_labels[settled:])
    assert cascade.findings(object_id)[0] == sub_labels[-1]
