from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_runtime.backends.base import TensorSpec
from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.decoded import Detections
from edge_runtime.decoders.ssd_anchors import SsdAnchorParams, generate_anchors
from edge_runtime.errors import ConfigError, ModelMismatchError
from edge_runtime.package.loader import open_package
from edge_runtime.pipeline.preprocess import FrameTransform, ImagePreprocessor

FACE_KEYPOINTS = ["right_eye", "left_eye", "nose_tip", "mouth_center", "right_ear_tragion", "left_ear_tragion"]
SPECS = [TensorSpec("regressors", (1, 896, 16), "float32"), TensorSpec("classificators", (1, 896, 1), "float32")]


def test_blazeface_anchor_layout(face_package_dir: Path) -> None:
    params = SsdAnchorParams.model_validate(open_package(face_package_dir).manifest.decoder.params)  # type: ignore[union-attr]
    anchors = generate_anchors(params, 128, 128)
    assert anchors.shape == (896, 4)  # 16x16 cells x 2 anchors + 8x8 cells x 6 anchors
    assert np.allclose(anchors[0], [0.5 / 16, 0.5 / 16, 1, 1])
    assert np.allclose(anchors[1], anchors[0])
    assert np.allclose(anchors[512], [0.5 / 8, 0.5 / 8, 1, 1])


def test_pretrained_face_detector_finds_the_astronauts_face(face_package_dir: Path, astronaut_bgr: np.ndarray) -> None:
    from ai_edge_litert.interpreter import Interpreter

    package = open_package(face_package_dir)
    interpreter = Interpreter(str(package.source("tflite/fp32").path), num_threads=1)
    interpreter.allocate_tensors()
    spec = package.manifest.inputs[0]
    tensor, transform = ImagePreprocessor(spec, TensorSpec("input", spec.shape, "float32"))(astronaut_bgr)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], tensor)
    interpreter.invoke()
    details = interpreter.get_output_details()
    outputs = [interpreter.get_tensor(d["index"]) for d in details]
    specs = [TensorSpec(d["name"], tuple(d["shape"]), "float32") for d in details]
    decoder = make_decoder("ssd_anchors", package.manifest.decoder.params, package.manifest.labels)  # type: ignore[union-attr]

    faces = decoder.decode(outputs, specs, transform).detections

    assert len(faces) == 1
    face = faces[0]
    assert face.label == "face" and face.score > 0.8
    x0, y0, x1, y1 = face.box  # the face is at about x 180-275, y 80-175 in the 512x512 photo
    assert 165 < x0 < 195 and 70 < y0 < 100 and 260 < x1 < 290 and 160 < y1 < 190
    right_eye, left_eye = face.keypoints[0], face.keypoints[1]
    assert right_eye.x < left_eye.x and abs(right_eye.y - left_eye.y) < 15  # the subject's right is the image's left
    assert all(point.in_frame for point in face.keypoints)
    result = decoder.decode(outputs, specs, transform)
    assert result.signature() == ("face",) and result.top_score == face.score
    [message] = result.to_dict()["detections"]
    assert message["label"] == "face" and len(message["box"]) == 4
    assert [point["name"] for point in message["keypoints"]] == FACE_KEYPOINTS
    assert message["keypoints"][2] == {"name": "nose_tip", "x": round(face.keypoints[2].x, 1),
                                       "y": round(face.keypoints[2].y, 1), "in_frame": True}  # fmt: skip
    with pytest.raises(ConfigError, match="decoder ssd_anchors reports image positions and needs an image input"):
        decoder.decode(outputs, specs)


def test_empty_scene_gives_no_detection(face_package_dir: Path) -> None:
    params = open_package(face_package_dir).manifest.decoder.params  # type: ignore[union-attr]
    decoder = make_decoder("ssd_anchors", params, ("face",))
    outputs = [np.zeros((1, 896, 16), np.float32), np.full((1, 896, 1), -200.0, np.float32)]
    transform = FrameTransform(128, 128, 1.0, 1.0, 0.0, 0.0, 128, 128)
    assert decoder.decode(outputs, SPECS, transform) == Detections()
    with pytest.raises(ModelMismatchError, match="896 anchors, the model outputs 10"):
        outputs = [np.zeros((1, 10, 16), np.float32), np.full((1, 10, 1), 5.0, np.float32)]
        decoder.decode(outputs, SPECS, transform)


def test_a_keypoint_outside_the_frame_is_not_moved_onto_its_edge(face_package_dir: Path) -> None:
    """One face near the top-left corner of a 256x128 frame letterboxed into the 128x128 input (32 padding rows above):
    its box is clipped to the frame, its right ear lies left of the frame and its eyes in the padding above it."""
    manifest = open_package(face_package_dir).manifest
    decoder = make_decoder("ssd_anchors", manifest.decoder.params, manifest.labels)  # type: ignore[union-attr]
    transform = FrameTransform(256, 128, 0.5, 0.5, 0.0, 32.0, 128, 128)
    regressors = np.zeros((1, 896, 16), np.float32)
    scores = np.full((1, 896, 1), -200.0, np.float32)
    # anchor 0 is centred at model pixel (4, 4), and regressor values are model pixels from that centre
    scores[0, 0, 0] = 10.0
    regressors[0, 0, 0:4] = [4.0, 4.0, 24.0, 24.0]  # box centre (8, 8), 24 px wide: x -4..20, y -4..20
    keypoints = [(4.0, -6.0), (12.0, -6.0), (8.0, 2.0), (8.0, 12.0), (-10.0, 4.0), (20.0, 40.0)]  # from the centre
    regressors[0, 0, 4:] = np.asarray(keypoints, np.float32).ravel()

    [face] = decoder.decode([regressors, scores], SPECS, transform).detections

    assert face.box == (0.0, 0.0, 40.0, 0.0)  # clipped: model y -4..20 is above the picture, which starts at y 32
    points = {point.name: point for point in face.keypoints}
    assert list(points) == FACE_KEYPOINTS
    # source pixel = (model pixel - offset) / 0.5: the right eye at model (8, -2) lies at source (16, -68)
    assert (points["right_eye"].x, points["right_eye"].y, points["right_eye"].in_frame) == (16.0, -68.0, False)
    assert (points["right_ear_tragion"].x, points["right_ear_tragion"].in_frame) == (-12.0, False)
    assert (points["left_ear_tragion"].x, points["left_ear_tragion"].y) == (48.0, 24.0)
    assert points["left_ear_tragion"].in_frame
    assert [p["in_frame"] for p in face.to_dict()["keypoints"]] == [False, False, False, False, False, True]


def test_keypoint_names_come_from_the_parameters_or_are_indices() -> None:
    params = {"num_layers": 1, "strides": [8], "min_scale": 0.1, "max_scale": 0.5, "box_scale": 8.0}
    assert make_decoder("ssd_anchors", params | {"num_keypoints": 2}, ()).keypoint_names == ("0", "1")  # type: ignore[attr-defined]
    named = make_decoder("ssd_anchors", params | {"keypoint_names": ["a", "b", "c"]}, ())
    assert named.keypoint_names == ("a", "b", "c") and named.keypoint_count == 3  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"num_keypoints is 2 but decoder\.params\.keypoint_names has 3 names"):
        make_decoder("ssd_anchors", params | {"num_keypoints": 2, "keypoint_names": ["a", "b", "c"]}, ())
    with pytest.raises(ConfigError, match="names a keypoint twice"):
        make_decoder("ssd_anchors", params | {"keypoint_names": ["a", "a"]}, ())


def test_bad_decoder_parameters_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"decoder\.params\.box_scale: Field required"):
        make_decoder("ssd_anchors", {"num_layers": 1, "strides": [8], "min_scale": 0.1, "max_scale": 0.5}, ())
    with pytest.raises(ConfigError, match="unknown decoder 'yolo9000'"):
        make_decoder("yolo9000", {}, ())
