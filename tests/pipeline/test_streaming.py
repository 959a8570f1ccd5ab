"""The pipeline's publishing policy, with MediaPipe's real face detector on OpenVINO and a real photograph.

The sink here records what the pipeline hands on; delivery to a broker is the publisher's job and is
tested against Mosquitto in tests/mqtt and tests/daemon.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import jsonschema
import numpy as np
import pytest
from recorders import RESULT_TOPIC, SNAPSHOT_TOPIC, FramesOnce, RecordingSink, face_decoder

from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.base import Decoder
from edge_runtime.mqtt.topics import Topics
from edge_runtime.package.loader import open_package
from edge_runtime.pipeline.outputs import Described, Output, PublishPolicy
from edge_runtime.pipeline.results import result_schema
from edge_runtime.pipeline.streaming import Pipeline
from edge_runtime.placement.model import LoadedModel, load_model


class RecordingStates:
    """Keeps every retained state put to it, as the daemon's RetainedStates would publish them, in order."""

    def __init__(self) -> None:
        self.puts: list[tuple[str, dict[str, Any]]] = []

    def put(self, topic: str, payload: bytes) -> None:
        self.puts.append((topic, json.loads(payload)))


@pytest.fixture
def frames(astronaut_bgr: np.ndarray) -> dict[str, np.ndarray]:
    """The astronaut (one face), a grey frame (none), and the astronaut shifted right by 100 px in a 640×512 frame."""
    shifted = np.zeros((512, 640, 3), np.uint8)
    shifted[:, 100:612] = astronaut_bgr
    return {"face": astronaut_bgr, "empty": np.full_like(astronaut_bgr, 128), "shifted": shifted}


def run(
    model: LoadedModel,
    images: Sequence[np.ndarray],
    policy: PublishPolicy,
    decoder: Decoder | None = None,
    extra_outputs: Sequence[Output] = (),
    states: RecordingStates | None = None,
) -> tuple[Pipeline, RecordingSink]:
    """Every image through a pipeline to its end, and what reached the sink (and `states`, where given)."""
    sink = RecordingSink()
    pipeline = Pipeline(
        name="faces",
        topics=Topics("edge", "box"),
        source=FramesOnce(images),
        model=model,
        decoder=decoder or face_decoder(model),
        input_spec=model.input_specs[0],
        policy=policy,
        sink=sink,
        extra_outputs=extra_outputs,
        retained=states,
    )
    pipeline.start()
    assert pipeline.finished.wait(30)
    pipeline.stop()
    return pipeline, sink


def test_each_frame_gives_one_valid_result_in_order_with_boxes_in_source_pixels(
    face_model: LoadedModel, frames: dict[str, np.ndarray]
) -> None:
    pipeline, sink = run(face_model, [frames["face"], frames["shifted"], frames["face"]], PublishPolicy())
    results = sink.results()
    schema = result_schema()
    for message in results:
        jsonschema.validate(message, schema)
    assert [m["index"] for m in results] == [0, 1, 2]
    assert len({m["id"] for m in results}) == 3
    assert all(qos == 1 and not retain for _, _, qos, retain in sink.on(RESULT_TOPIC))
    boxes = [m["result"]["detections"][0]["box"] for m in results]
    assert abs((boxes[1][0] - boxes[0][0]) - 100) < 3  # the shifted face is found 100 px further right
    assert boxes[0] == pytest.approx(boxes[2], abs=1e-3)
    assert all(v >= 0 for v in results[0]["latency_ms"].values())
    assert pipeline.stats.results == 3 and pipeline.stats.errors == 0


def test_a_result_gives_the_frame_size_and_the_face_detector_s_keypoint_names(
    face_model: LoadedModel, frames: dict[str, np.ndarray]
) -> None:
    """Boxes and keypoints are in source pixels, so each result says the frame's size; the face detector's landmarks
    carry MediaPipe's names."""
    _, sink = run(face_model, [frames["face"], frames["shifted"]], PublishPolicy())
    results = sink.results()
    assert [m["frame"] for m in results] == [{"width": 512, "height": 512}, {"width": 640, "height": 512}]
    for message in results:
        [face] = message["result"]["detections"]
        assert [point["name"] for point in face["keypoints"]] == [
            "right_eye", "left_eye", "nose_tip", "mouth_center", "right_ear_tragion", "left_ear_tragion",
        ]  # fmt: skip
        assert all(point["in_frame"] for point in face["keypoints"])


def test_the_model_s_digests_are_put_once_on_the_retained_model_topic_not_in_results(
    face_model: LoadedModel, frames: dict[str, np.ndarray]
) -> None:
    states = RecordingStates()
    _, sink = run(face_model, [frames["face"]] * 3, PublishPolicy(), states=states)
    for message in sink.results():
        assert "sha256" not in message["model"] and "sha256" not in json.dumps(message)
    variant = face_model.package.manifest.variants["openvino/fp32"]
    assert states.puts == [
        (
            "edge/box/faces/model",
            {
                "schema_version": 2,
                "name": "face_detection_short_range",
                "version": face_model.package.manifest.version,
                "variant": "openvino/fp32",
                "sha256": variant.files[0].sha256,
                "files": {file.path: file.sha256 for file in variant.files},
            },
        )
    ]


@pytest.fixture
def two_faces(astronaut_bgr: np.ndarray) -> np.ndarray:
    """The astronaut's face twice on grey, the right one faded: the detector scores it about 0.1 lower."""
    face = astronaut_bgr[40:300, 120:380].astype(np.float32)
    frame = np.full((480, 640, 3), 90, np.uint8)
    frame[100:360, 20:280] = face.astype(np.uint8)
    frame[100:360, 360:620] = (face * 0.15 + 0.85 * 110).astype(np.uint8)
    return frame


def test_a_score_threshold_leaves_out_detections_below_it_and_sends_nothing_for_a_frame_left_with_none(
    face_model: LoadedModel, frames: dict[str, np.ndarray], two_faces: np.ndarray
) -> None:
    images = [two_faces, frames["empty"], frames["face"]]
    _, everything = run(face_model, images, PublishPolicy())
    bright, faded = everything.results()[0]["result"]["detections"]
    assert bright["box"][0] < 300 < faded["box"][0] and faded["score"] + 0.05 < bright["score"]
    assert everything.results()[1]["result"]["detections"] == []
    threshold = (bright["score"] + faded["score"]) / 2
    _, above = run(face_model, images, PublishPolicy(min_score=threshold))
    results = above.results()
    assert [m["index"] for m in results] == [0, 2]
    assert results[0]["result"]["detections"] == [bright]  # the faded face is left out, the bright one unchanged
    for message in results:
        jsonschema.validate(message, result_schema())
        assert all(d["score"] >= threshold for d in message["result"]["detections"])
    best = max(d["score"] for m in everything.results() for d in m["result"]["detections"])
    _, none = run(face_model, images, PublishPolicy(min_score=min(1.0, best + 0.01)))
    assert none.results() == []


def test_only_on_change_compares_what_the_score_threshold_leaves(
    face_model: LoadedModel, frames: dict[str, np.ndarray], two_faces: np.ndarray
) -> None:
    """A face below the threshold appearing is no news: the published result is the same."""
    one_face = two_faces.copy()
    one_face[100:360, 360:620] = 90
    images = [one_face, two_faces, one_face]
    _, everything = run(face_model, images, PublishPolicy(only_on_change=True))
    assert [m["index"] for m in everything.results()] == [0, 1, 2]
    faded_score = everything.results()[1]["result"]["detections"][1]["score"]
    _, thresholded = run(face_model, images, PublishPolicy(only_on_change=True, min_score=faded_score + 0.03))
    assert [m["index"] for m in thresholded.results()] == [0]


def test_only_on_change_publishes_when_what_was_found_changes(
    face_model: LoadedModel, frames: dict[str, np.ndarray]
) -> None:
    face, empty, shifted = frames["face"], frames["empty"], frames["shifted"]
    _, sink = run(face_model, [face, face, shifted, empty, empty, face], PublishPolicy(only_on_change=True))
    # a moved face is the same news; a face leaving and coming back is not
    assert [m["index"] for m in sink.results()] == [0, 3, 5]


def test_retain_and_qos_are_handed_to_the_publisher(face_model: LoadedModel, frames: dict[str, np.ndarray]) -> None:
    _, sink = run(face_model, [frames["face"]], PublishPolicy(qos=2, retain=True))
    assert [(qos, retain) for _, _, qos, retain in sink.on(RESULT_TOPIC)] == [(2, True)]


def test_snapshots_are_annotated_jpegs_at_most_once_per_interval(
    face_model: LoadedModel, frames: dict[str, np.ndarray]
) -> None:
    _, sink = run(face_model, [frames["face"]] * 6, PublishPolicy(snapshot_interval_s=60.0, jpeg_quality=90))
    snapshots = sink.on(SNAPSHOT_TOPIC)
    assert len(snapshots) == 1 and len(sink.results()) == 6
    _, payload, qos, retain = snapshots[0]
    assert (qos, retain) == (0, True)
    picture = cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_COLOR)
    assert picture.shape == frames["face"].shape
    box = [round(v) for v in sink.results()[0]["result"]["detections"][0]["box"]]
    edge = picture[box[1], box[0] : box[2]].astype(int)  # the box's top edge is drawn in green
    assert np.median(edge[:, 1] - edge[:, [0, 2]].max(axis=1)) > 100


def test_a_result_that_cannot_be_decoded_is_counted_and_the_pipeline_runs_on(
    face_model: LoadedModel, frames: dict[str, np.ndarray]
) -> None:
    wrong = make_decoder("ssd_anchors", {**_face_params(face_model), "num_layers": 2, "strides": [8, 8]}, ("face",))
    pipeline, sink = run(face_model, [frames["face"]] * 3, PublishPolicy(), decoder=wrong)
    assert pipeline.stats.errors == 3 and sink.results() == []
    assert pipeline.source.stats.delivered == 3  # every frame was still read and inferred


def _face_params(model: LoadedModel) -> dict[str, Any]:
    spec = model.package.manifest.decoder
    assert spec is not None
    return dict(spec.params)


def test_a_failing_output_is_counted_and_the_others_still_run(
    face_model: LoadedModel, frames: dict[str, np.ndarray]
) -> None:
    seen: list[int] = []

    def broken(described: Described) -> None:
        raise OSError("disk full")

    def counting(described: Described) -> None:
        seen.append(described.item.index)

    pipeline, sink = run(face_model, [frames["face"]] * 3, PublishPolicy(), extra_outputs=[broken, counting])
    assert [r["index"] for r in sink.results()] == [0, 1, 2]  # the result output ran before the broken one
    assert seen == [0, 1, 2]  # and the one after it too
    assert pipeline.stats.errors == 3


def test_a_model_swapped_mid_stream_takes_over_between_two_frames(
    face_model: LoadedModel, face_package_dir: Path, frames: dict[str, np.ndarray]
) -> None:
    """No frame lost or published twice; every result names the model that ran it; the old model finishes its own."""
    replacement = load_model(open_package(face_package_dir), "tflite/fp32", "litert", {"precision": "fp32"})
    sink = RecordingSink()
    states = RecordingStates()
    images = [frames["face"]] * 400
    source = FramesOnce(images)
    pipeline = Pipeline(
        name="faces",
        topics=Topics("edge", "box"),
        source=source,
        model=face_model,
        decoder=face_decoder(face_model),
        input_spec=face_model.input_specs[0],
        policy=PublishPolicy(),
        sink=sink,
        retained=states,
    )
    try:
        pipeline.start()
        while source.stats.delivered < 50:
            time.sleep(0.005)
        pipeline.swap_model(replacement, face_decoder(replacement), replacement.input_specs[0])
        swapped_at = source.stats.delivered
        assert pipeline.finished.wait(60)
        pipeline.stop()
    finally:
        replacement.close()
    results = sorted(sink.results(), key=lambda m: int(m["index"]))  # requests in flight may finish out of order
    assert [m["index"] for m in results] == list(range(len(images)))
    variants = [m["model"]["variant"] for m in results]
    first_new = variants.index("tflite/fp32")
    assert set(variants[:first_new]) == {"openvino/fp32"} and set(variants[first_new:]) == {"tflite/fp32"}
    assert 50 <= first_new <= swapped_at  # the switch fell between two frames read around the call
    runtimes = {m["runtime"]["backend"] for m in results[first_new:]}
    assert runtimes == {"litert"} and pipeline.model is replacement
    # Both models find the same face: the swap changed the model, not what the frames meant.
    old_box, new_box = (
        results[first_new - 1]["result"]["detections"][0]["box"],
        results[first_new]["result"]["detections"][0]["box"],
    )
    assert old_box == pytest.approx(new_box, abs=2.0)
    # the retained model topic follows the swap: the model in use, with its own file's digest
    announced = [(topic, record["variant"], record["sha256"]) for topic, record in states.puts]
    digests = {v: face_model.package.manifest.variants[v].files[0].sha256 for v in ("openvino/fp32", "tflite/fp32")}
    assert announced == [("edge/box/faces/model", variant, digest) for variant, digest in digests.items()]


def test_a_swap_whose_new_runner_fails_keeps_the_old_model(
    face_model: LoadedModel, face_package_dir: Path, frames: dict[str, np.ndarray]
) -> None:
    """The new model's runner cannot open (the model was closed): the swap raises, the stream goes on unchanged."""
    sink = RecordingSink()
    source = FramesOnce([frames["face"]] * 60)
    pipeline = Pipeline(
        name="faces", topics=Topics("edge", "box"), source=source, model=face_model,
        decoder=face_decoder(face_model), input_spec=face_model.input_specs[0], policy=PublishPolicy(), sink=sink,
    )  # fmt: skip
    broken = load_model(open_package(face_package_dir), "openvino/fp32", "openvino", {"precision": "fp32"})
    broken.close()
    pipeline.start()
    with pytest.raises(AttributeError):
        pipeline.swap_model(broken, face_decoder(face_model), face_model.input_specs[0])
    assert pipeline.finished.wait(30)
    pipeline.stop()
    assert sorted(m["index"] for m in sink.results()) == list(range(60))
    assert {m["model"]["variant"] for m in sink.results()} == {"openvino/fp32"} and pipeline.model is face_model
