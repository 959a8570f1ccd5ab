"""A real daemon and a real broker running a cascade: MediaPipe's face detector on the bundled clip, MediaPipe's
face landmark model on each face's crop, and a small classifier giving each tracked face a sub-label.

The landmarks in the result messages are compared with the landmark model run here, directly, on the crop of
the same frame: equal within 0.06 px. Result messages round positions to 0.1 px (0.05 either way), and the
daemon may run the model on another backend than the one here (OpenVINO and LiteRT both read the .tflite),
whose float32 kernels differ by far less than 0.01 px on a 192-pixel input; the box matched to a frame is
compared within the same rounding.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import jsonschema
import numpy as np
import pytest
from broker import Mosquitto
from daemon_process import FACE_MODEL, DaemonProcess
from test_daemon_objects import valid

from edge_runtime.decoders.decoded import Detections, Keypoints
from edge_runtime.package.loader import open_package
from edge_runtime.package.manifest import InputSpec, ModelFormat, Precision, Task
from edge_runtime.package.writer import describe_variant, write_package
from edge_runtime.pipeline.build import decoder_of
from edge_runtime.pipeline.cascade import crop_region
from edge_runtime.pipeline.preprocess import preprocessor_for
from edge_runtime.pipeline.results import result_schema
from edge_runtime.placement.model import LoadedModel, load_model

REPO = Path(__file__).resolve().parents[2]
CLIP = REPO / "samples" / "videos" / "astronaut.mp4"
LANDMARKS = REPO / "samples" / "models" / "face_landmark"
BASE = "edge/test-box/faces"
PADDING = 0.25
TOLERANCE_PX = 0.06
WHO = tuple(f"person-{i}" for i in range(10))


def classifier_package(tiny_onnx: Path, root: Path) -> Path:
    (root / "onnx" / "fp32").mkdir(parents=True)
    (root / "onnx" / "fp32" / "model.onnx").write_bytes(tiny_onnx.read_bytes())
    variants = {"onnx/fp32": describe_variant(root, ["onnx/fp32/model.onnx"], ModelFormat.ONNX, Precision.FP32)}
    spec = InputSpec(shape=(1, 3, 32, 32), layout="NCHW", color_order="RGB", mean=(127.5,), std=(64.0,))
    write_package(
        root,
        variants,
        name="who",
        task=Task.CLASSIFICATION,
        inputs=(spec,),
        labels=WHO,
        decoder={"name": "classification", "params": {"top_k": 3}},
    )
    return root


def run_direct(model: LoadedModel, image: np.ndarray) -> Any:
    tensor, transform = preprocessor_for(model.input_specs[0], model.inputs[0])(image)
    return decoder_of(model).decode(model.infer([tensor]), model.outputs, transform)


def expected_per_frame() -> list[tuple[tuple[float, ...], np.ndarray]]:
    """Each frame of the clip: the face's box as the detector gives it, and its landmarks in frame pixels."""
    detector = load_model(open_package(FACE_MODEL), "openvino/fp32", "openvino", {"precision": "fp32"})
    landmarks = load_model(open_package(LANDMARKS), "tflite/fp32", "litert", {})
    expected = []
    capture = cv2.VideoCapture(str(CLIP))
    try:
        while True:
            ok, image = capture.read()
            if not ok:
                break
            found = run_direct(detector, image)
            assert isinstance(found, Detections)
            for face in found.detections:
                height, width = image.shape[:2]
                left, top, right, bottom = crop_region(face.box, PADDING, width, height)
                points = run_direct(landmarks, image[top:bottom, left:right])
                assert isinstance(points, Keypoints)
                expected.append((face.box, np.array([(p.x + left, p.y + top) for p in points.keypoints])))
    finally:
        capture.release()
        detector.close()
        landmarks.close()
    return expected


@pytest.fixture
def who_package(tiny_onnx: Path, tmp_path: Path) -> Path:
    return classifier_package(tiny_onnx, tmp_path / "who")


def test_landmarks_and_sub_labels_reach_the_broker_with_results_events_and_updates(
    mosquitto: Mosquitto,
    who_package: Path,
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    pipeline = {
        "name": "faces",
        "source": {"type": "file", "path": str(CLIP), "realtime": True},  # 6 s at 10 frames a second
        "model": {"path": str(FACE_MODEL)},
        "track": {"labels": ["face"]},
        "events": {},
        "cascade": [
            {"name": "landmarks", "model": {"path": str(LANDMARKS)}, "labels": ["face"], "padding": PADDING},
            {
                "name": "who",
                "model": {"path": str(who_package)},
                "labels": ["face"],
                "attach": "sub_label",
                "reinfer": {"interval_s": 0.05},  # every frame
                "consensus": {"min_attempts": 3, "min_score": 0.0},
            },
        ],
    }
    watcher = mosquitto.subscribe_collect("edge/test-box/#")
    daemon = run_daemon(write_config(mosquitto, [pipeline]), exit_when_done=True)
    assert daemon.wait(180) == 0, daemon.log
    ended = lambda m: any(e["type"] == "end" for e in valid(m, f"{BASE}/events", "event"))  # noqa: E731
    assert watcher.wait_until(ended, timeout=20), daemon.log
    messages = list(watcher.messages)

    results = [json.loads(m.payload) for m in messages if m.topic == f"{BASE}/result"]
    assert len(results) >= 20, daemon.log
    for result in results:
        jsonschema.validate(result, result_schema())
    faces = [d for result in results for d in result["result"]["detections"] if "track_id" in d]
    with_points = [d for d in faces if "landmarks" in d.get("attributes", {})]
    assert with_points, daemon.log
    expected = expected_per_frame()
    compared = 0
    for detection in with_points:
        box = np.array(detection["box"])
        same = [points for face_box, points in expected if np.abs(np.array(face_box) - box).max() <= 0.051]
        assert same, f"no frame of the clip gives the face at {detection['box']}"
        got = np.array([(p["x"], p["y"]) for p in detection["attributes"]["landmarks"]])
        assert got.shape == (468, 2)
        assert min(np.abs(got - points).max() for points in same) <= TOLERANCE_PX
        compared += 1
    assert compared == len(with_points)

    [object_id] = {d["track_id"] for d in faces}  # one face, one object, for the whole clip
    updates = valid(messages, f"{BASE}/objects/{object_id}/update", "object_update")
    assert len(updates) == 1, daemon.log  # the same face's crops keep one top class: given once, never changed
    [update] = updates
    assert (update["id"], update["label"], update["stage"]) == (object_id, "face", "who")
    assert update["sub_label"] in WHO
    named = [d for d in faces if "sub_label" in d]
    assert named and all(d["sub_label"]["label"] == update["sub_label"] for d in named)
    assert faces.index(named[0]) >= 2  # not before the third attempt

    events = valid(messages, f"{BASE}/events", "event")
    assert events[0]["type"] == "new" and events[-1]["type"] == "end"
    assert events[-1]["after"]["sub_label"]["label"] == update["sub_label"]
    assert events[0]["after"]["sub_label"] is None  # `new` goes out when the face is confirmed, before 3 attempts
    told = [e for e in events if e["type"] == "update" and e["before"]["sub_label"] is None and e["after"]["sub_label"]]
    assert len(told) == 1 and told[0]["after"]["sub_label"]["label"] == update["sub_label"]  # given: an update

    stats = [json.loads(m.payload) for m in messages if m.topic == "edge/test-box/stats"]
    assert stats and stats[-1]["pipelines"]["faces"]["crops"] >= len(with_points), stats[-1:]
