"""Pipeline paths besides the main conversions: IR sources, ImageFolder validation, output folder handling."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from converters.describe import InputFlags
from converters.errors import ConversionError
from converters.pipeline import ConvertOptions, convert
from edge_runtime.package.loader import open_package


def test_openvino_ir_source_builds_openvino_variants_and_skips_onnx(tiny_openvino: Path, tmp_path: Path) -> None:
    options = ConvertOptions(
        model=tiny_openvino, out_dir=tmp_path / "out", variants=("openvino/fp16", "onnx/fp32"), bench_seconds=0
    )
    report = convert(options)
    rows = {r.variant_id: r for r in report.variants}
    assert rows["openvino/fp16"].status == "ok"
    assert rows["openvino/fp16"].agreement is not None and rows["openvino/fp16"].agreement.max_abs_error < 1e-3
    assert rows["onnx/fp32"].status == "skipped" and "back to ONNX" in rows["onnx/fp32"].message
    assert report.reference.startswith("tiny.xml on openvino:CPU at fp32")


def test_image_folder_validation_gives_labels_and_top1(tiny_onnx: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    for name in ("apple", "banana", "cherry"):
        (tmp_path / "val" / name).mkdir(parents=True)
        for i in range(4):
            cv2.imwrite(str(tmp_path / "val" / name / f"{i}.png"), rng.integers(0, 256, (36, 36, 3), dtype=np.uint8))
    options = ConvertOptions(
        model=tiny_onnx,
        out_dir=tmp_path / "out",
        input_flags=InputFlags(color_order="RGB", mean=(127.5,), std=(64.0,)),
        validation=tmp_path / "val",
        variants=("openvino/fp32", "onnx/fp32"),
        bench_seconds=0,
    )
    report = convert(options)
    manifest = open_package(tmp_path / "out").manifest
    assert manifest.labels == ("apple", "banana", "cherry")
    assert manifest.task.value == "classification"
    assert report.evaluated_on == f"12 images in 3 classes from {tmp_path / 'val'}"
    assert report.reference_accuracy is not None
    for row in report.variants:
        assert row.accuracy is not None and row.accuracy.top1 == report.reference_accuracy.top1
        assert row.drop is not None and row.drop.points == pytest.approx(0.0)
    assert not any("BGR" in w for w in report.warnings)  # colour order and normalisation were given
    plain = ConvertOptions(
        model=tiny_onnx,
        out_dir=tmp_path / "plain",
        calibration=tmp_path / "val",
        variants=("onnx/fp32",),
        bench_seconds=0,
    )
    assert any("BGR, 0-255" in w for w in convert(plain).warnings)


def test_output_folder_is_not_mixed_with_other_files(tiny_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    options = ConvertOptions(model=tiny_onnx, out_dir=out, variants=("onnx/fp32",), bench_seconds=0)
    convert(options)
    with pytest.raises(ConversionError, match="is not empty; choose another or pass --overwrite"):
        convert(options)
    (out / "openvino" / "int8").mkdir(parents=True)
    (out / "openvino" / "int8" / "stale.xml").write_text("old")
    (out / "notes.txt").write_text("the user's")
    convert(ConvertOptions(model=tiny_onnx, out_dir=out, variants=("onnx/fp32",), bench_seconds=0, overwrite=True))
    assert not (out / "openvino" / "int8").exists()
    assert (out / "notes.txt").read_text() == "the user's"
    assert set(open_package(out).manifest.variants) == {"onnx/fp32"}


def test_source_inside_a_folder_the_conversion_rewrites_is_refused(tiny_onnx: Path, tmp_path: Path) -> None:
    inside = tmp_path / "pkg" / "onnx" / "fp32" / "model.onnx"
    inside.parent.mkdir(parents=True)
    inside.write_bytes(tiny_onnx.read_bytes())
    options = ConvertOptions(model=inside, out_dir=tmp_path / "pkg", variants=("onnx/fp32",), overwrite=True)
    with pytest.raises(ConversionError, match="which the conversion rewrites"):
        convert(options)
    assert inside.exists()


def test_default_name_skips_package_layout_folders() -> None:
    from converters.pipeline import _default_name

    packaged = Path("zoo/face_detection_short_range/tflite/fp32/model.tflite")
    assert _default_name(packaged) == "face_detection_short_range"
    assert _default_name(Path("zoo/resnet50.onnx")) == "resnet50"
