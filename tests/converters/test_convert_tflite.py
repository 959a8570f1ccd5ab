"""Converting MediaPipe's real BlazeFace TFLite detector: OpenVINO variants, and ONNX ones skipped with why."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from converters.describe import InputFlags
from converters.pipeline import ConvertOptions, convert
from converters.report import ConversionReport
from edge_runtime.backends.base import TensorSpec
from edge_runtime.package.loader import open_package
from edge_runtime.package.manifest import InputSpec, Task
from edge_runtime.pipeline.preprocess import ImagePreprocessor
from edge_runtime.placement.model import load_model

FACE_SPEC = InputSpec(
    shape=(1, 128, 128, 3), layout="NHWC", color_order="RGB", resize="letterbox", mean=(127.5,), std=(127.5,)
)


@pytest.fixture(scope="module")
def face_images(astronaut_bgr: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Crops of a real photo at several positions and scales, as a calibration folder."""
    folder = tmp_path_factory.mktemp("face_images")
    for i in range(12):
        crop = astronaut_bgr[i * 15 : 512 - i * 5, i * 10 :]
        cv2.imwrite(str(folder / f"crop{i:02d}.jpg"), crop)
    (folder / "notes.txt").write_text("not an image; ignored")
    return folder


@pytest.fixture(scope="module")
def face_conversion(
    face_package_dir: Path, face_images: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[ConversionReport, Path]:
    out_dir = tmp_path_factory.mktemp("face_package")
    options = ConvertOptions(
        model=face_package_dir / "tflite" / "fp32" / "model.tflite",
        out_dir=out_dir,
        name="face_detection_short_range",
        task="detection",
        labels="face",
        input_flags=InputFlags(color_order="RGB", mean=(127.5,), std=(127.5,), resize="letterbox"),
        calibration=face_images,
        bench_seconds=0.05,
    )
    return convert(options), out_dir


def test_openvino_fp32_agrees_with_the_tflite_model_in_litert(
    face_conversion: tuple[ConversionReport, Path], face_package_dir: Path, astronaut_bgr: np.ndarray
) -> None:
    from ai_edge_litert.interpreter import Interpreter

    _, out_dir = face_conversion
    tensor = ImagePreprocessor(FACE_SPEC, TensorSpec("input", FACE_SPEC.shape, "float32"))(astronaut_bgr)[0]
    interpreter = Interpreter(model_path=str(face_package_dir / "tflite" / "fp32" / "model.tflite"))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], tensor)
    interpreter.invoke()
    expected = {d["name"]: interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()}

    model = load_model(open_package(out_dir), "openvino/fp32", "openvino")
    try:
        outputs = dict(zip([t.name for t in model.outputs], model.infer([tensor]), strict=True))
    finally:
        model.close()
    assert set(outputs) == {"regressors", "classificators"}
    for name, reference in expected.items():
        np.testing.assert_allclose(outputs[name].reshape(reference.shape), reference, atol=2e-3, rtol=0)
    assert float(expected["classificators"].max()) > 0  # the photo's face scores high, so this compares real signal


def test_report_agreement_of_the_fp32_variant_is_tight(face_conversion: tuple[ConversionReport, Path]) -> None:
    report, _ = face_conversion
    assert report.reference.startswith("model.tflite on litert")
    rows = {r.variant_id: r for r in report.variants}
    fp32 = rows["openvino/fp32"]
    assert fp32.status == "ok" and fp32.agreement is not None
    assert fp32.agreement.max_abs_error < 2e-3 and fp32.agreement.cosine > 0.99999
    assert [o.name for o in fp32.agreement.outputs] == ["regressors", "classificators"]
    int8 = rows["openvino/int8"]
    assert int8.status == "ok" and int8.agreement is not None and int8.agreement.cosine > 0.9
    for row in report.variants:
        if row.drop is not None:
            assert row.flagged is (row.drop.points > report.drop_threshold)


def test_onnx_variants_are_skipped_with_the_tf2onnx_reason(face_conversion: tuple[ConversionReport, Path]) -> None:
    report, out_dir = face_conversion
    rows = {r.variant_id: r for r in report.variants}
    for variant_id in ("onnx/fp32", "onnx/int8"):
        assert rows[variant_id].status == "skipped"
        assert "tf2onnx" in rows[variant_id].message
    markdown = (out_dir / "report.md").read_text()
    assert markdown.count("skipped: ONNX variants from a TFLite model need tf2onnx") == 2
    data = json.loads((out_dir / "report.json").read_text())
    assert {row["variant_id"]: row["status"] for row in data["variants"]}["onnx/int8"] == "skipped"
    assert set(open_package(out_dir).manifest.variants) == {"openvino/fp32", "openvino/fp16", "openvino/int8"}


def test_manifest_carries_the_input_spec_and_labels(face_conversion: tuple[ConversionReport, Path]) -> None:
    _, out_dir = face_conversion
    manifest = open_package(out_dir).manifest
    assert manifest.inputs == (FACE_SPEC,)
    assert manifest.task is Task.DETECTION
    assert manifest.labels == ("face",)
    assert manifest.output_names == ("regressors", "classificators")
    assert manifest.name == "face_detection_short_range"


def test_calibration_images_are_read_and_counted(face_conversion: tuple[ConversionReport, Path]) -> None:
    report, _ = face_conversion
    assert report.calibration.startswith("12 samples from ")
    assert any("only 12 samples" in w for w in report.warnings)
