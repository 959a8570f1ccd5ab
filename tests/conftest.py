from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from broker import Mosquitto
from int8_models import quantize_qdq, tiny_images
from model_builders import build_tiny_classifier_onnx, convert_to_openvino_ir

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def face_package_dir() -> Path:
    """MediaPipe's pretrained BlazeFace short-range detector as a model package (tflite + OpenVINO IR)."""
    return SAMPLES / "models" / "face_detection_short_range"


@pytest.fixture(scope="session")
def astronaut_bgr() -> np.ndarray:
    """A real photograph (public domain) with one face, as OpenCV reads it: 512x512 BGR uint8."""
    image = cv2.imread(str(SAMPLES / "images" / "astronaut.jpg"), cv2.IMREAD_COLOR)
    assert image is not None
    return image


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_classifier_onnx(tmp_path_factory.mktemp("tiny") / "tiny.onnx")


@pytest.fixture(scope="session")
def tiny_int8_onnx(tiny_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny classifier quantized as edge-convert quantizes ONNX models, calibrated on 16 images."""
    calibration = tiny_images(np.random.default_rng(7), 16)
    return quantize_qdq(tiny_onnx, tmp_path_factory.mktemp("tiny_int8") / "tiny_int8.onnx", calibration)


@pytest.fixture(scope="session")
def tiny_openvino(tiny_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert_to_openvino_ir(tiny_onnx, tmp_path_factory.mktemp("tiny_ir") / "tiny.xml")


@pytest.fixture(scope="session")
def tiny_variant_files(tiny_onnx: Path, tiny_openvino: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny classifier's files as onnx/fp32, onnx/int8 (dynamically quantized) and openvino/fp32, no manifest."""
    import shutil

    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = tmp_path_factory.mktemp("tiny_variant_files")
    for folder in ("onnx/fp32", "onnx/int8", "openvino/fp32"):
        (root / folder).mkdir(parents=True)
    shutil.copy(tiny_onnx, root / "onnx/fp32/model.onnx")
    quantize_dynamic(tiny_onnx, root / "onnx/int8/model.onnx", weight_type=QuantType.QInt8, reduce_range=True)
    shutil.copy(tiny_openvino, root / "openvino/fp32/model.xml")
    shutil.copy(tiny_openvino.with_suffix(".bin"), root / "openvino/fp32/model.bin")
    return root


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    """A real Mosquitto broker on free loopback ports (anonymous, no persistence), stopped after the test."""
    with Mosquitto(tmp_path / "broker") as broker:
        yield broker


# tests/peers compares edge_runtime with other projects' own code, which this environment does not have:
# `make test-peers` runs it from its own environment (.venv-peers), by naming it. tests/image runs against the
# container image, which `make image-test` builds first. tests/homeassistant runs a real Home Assistant set up
# once per machine as root: `make test-homeassistant` sets it up and runs it, by naming it.
collect_ignore = ["peers", "image", "homeassistant"]
