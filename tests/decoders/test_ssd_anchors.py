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
    assert right_eye[0] < left_eye[0] and abs(right_eye[1] - left_eye[1]) < 15
    result = decoder.decode(outputs, specs, transform)
    assert result.signature() == ("face",) and result.top_score == face.score
    [message] = result.to_dict()["detections"]
    assert message["label"] == "face" and len(message["box"]) == 4 and len(message["keypoints"]) == 6
    with pytest.raises(ConfigError, match="decoder ssd_anchors reports image positions and needs an image input"):
        decoder.decode(outputs, specs)


def test_empty_scene_gives_no_detection(face_package_dir: Path) -> None:
    params = open_package(face_package_dir).manifest.decoder.params  # type: ignore[union-attr]
    decoder = make_decoder("ssd_anchors", params, ("face",))
    specs = [
        TensorSpec("regressors", (1, 896, 16), "float32"),
        TensorSpec("classificators", (1, 896, 1), "float32"),
    ]
    outputs = [np.zeros((1, 896, 16), np.float32), np.full((1, 896, 1), -200.0, np.float32)]
    transform = FrameTransform(128, 128, 1.0, 1.0, 0.0, 0.0, 128, 128)
    assert decoder.decode(outputs, specs, transform) == Detections()
    with pytest.raises(ModelMismatchError, match="896 anchors, the model outputs 10"):
        outputs = [np.zeros((1, 10, 16), np.float32), np.full((1, 10, 1), 5.0, np.float32)]
        decoder.decode(outputs, specs, transform)


def test_bad_decoder_parameters_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"decoder\.params\.box_scale: Field required"):
        make_decoder("ssd_anchors", {"num_layers": 1, "strides": [8], "min_scale": 0.1, "max_scale": 0.5}, ())
    with pytest.raises(ConfigError, match="unknown decoder 'yolo9000'"):
        make_decoder("yolo9000", {}, ())
