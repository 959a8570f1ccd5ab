"""Converting the tiny ONNX classifier end to end with the real toolchains (OpenVINO, NNCF, ONNX Runtime)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from converters.pipeline import ConvertOptions, convert
from converters.report import ConversionReport
from converters.variants import DEFAULT_VARIANTS
from edge_runtime.package.loader import open_package, sha256_of
from edge_runtime.package.manifest import Precision, Task
from edge_runtime.placement.model import load_model

ALL = ("openvino/fp32", "openvino/fp16", "openvino/int8", "onnx/fp32", "onnx/int8")


def test_every_variant_is_built_and_packaged(tiny_conversion: tuple[ConversionReport, Path]) -> None:
    report, out_dir = tiny_conversion
    assert [r.variant_id for r in report.variants] == list(ALL) == list(DEFAULT_VARIANTS)
    assert {r.variant_id: r.status for r in report.variants} == dict.fromkeys(ALL, "ok")
    package = open_package(out_dir)
    manifest = package.manifest
    assert set(manifest.variants) == set(ALL)
    assert manifest.task is Task.CLASSIFICATION
    assert manifest.labels == tuple(f"class{i}" for i in range(10))
    assert manifest.inputs[0].shape == (1, 3, 32, 32) and manifest.inputs[0].layout == "NCHW"
    assert manifest.output_names == ("probabilities",)
    assert manifest.variants["openvino/int8"].precision is Precision.INT8
    assert manifest.variants["openvino/fp16"].precision is Precision.FP16


def test_every_file_matches_its_checksum_and_size(tiny_conversion: tuple[ConversionReport, Path]) -> None:
    _, out_dir = tiny_conversion
    for variant in open_package(out_dir).manifest.variants.values():
        for entry in variant.files:
            assert sha256_of(out_dir / entry.path) == entry.sha256
        assert variant.size_bytes == sum((out_dir / f.path).stat().st_size for f in variant.files)
    openvino_files = [f.path for f in open_package(out_dir).manifest.variants["openvino/int8"].files]
    assert openvino_files == ["openvino/int8/model.xml", "openvino/int8/model.bin"]


@pytest.mark.parametrize("variant_id", ALL)
def test_each_variant_loads_and_runs_in_the_runtime(
    tiny_conversion: tuple[ConversionReport, Path], tiny_calibration: Path, variant_id: str
) -> None:
    _, out_dir = tiny_conversion
    package = open_package(out_dir)
    backend = "openvino" if variant_id.startswith("openvino") else "onnxruntime"
    model = load_model(package, variant_id, backend)
    try:
        sample = np.load(tiny_calibration)[:1]
        (probabilities,) = model.infer([sample])
        assert probabilities.shape == (1, 10)
        assert probabilities.sum() == pytest.approx(1.0, abs=1e-2)
        if variant_id.endswith("int8"):
            assert model.backend.runs_on.precision == "int8"
    finally:
        model.close()


def test_int8_agrees_with_fp32_on_the_calibration_data(tiny_conversion: tuple[ConversionReport, Path]) -> None:
    report, out_dir = tiny_conversion
    rows = {r.variant_id: r for r in report.variants}
    for variant_id in ("openvino/int8", "onnx/int8"):
        agreement = rows[variant_id].agreement
        assert agreement is not None
        assert agreement.cosine > 0.99
        assert agreement.max_abs_error < 0.05
    fp32 = rows["openvino/fp32"].agreement
    assert fp32 is not None and fp32.max_abs_error < 1e-5
    manifest = open_package(out_dir).manifest
    assert manifest.variants["onnx/int8"].accuracy["cosine_vs_fp32"] > 0.99


def test_int8_weights_are_smaller_than_fp32_weights(tiny_conversion: tuple[ConversionReport, Path]) -> None:
    _, out_dir = tiny_conversion
    assert (out_dir / "openvino/int8/model.bin").stat().st_size < (out_dir / "openvino/fp32/model.bin").stat().st_size


def test_report_files_hold_every_variant(tiny_conversion: tuple[ConversionReport, Path]) -> None:
    report, out_dir = tiny_conversion
    markdown = (out_dir / "report.md").read_text()
    data = json.loads((out_dir / "report.json").read_text())
    for variant_id in ALL:
        assert f"`{variant_id}`" in markdown
    assert [row["variant_id"] for row in data["variants"]] == list(ALL)
    for row in data["variants"]:
        assert row["size_bytes"] > 0
        assert row["speed"]["latency"]["median_ms"] > 0
        assert row["speed"]["throughput"]["throughput_fps"] > 0
        assert 0.0 <= row["sparsity"] <= 1.0
        assert row["flagged"] is (row["drop"]["points"] > data["drop_threshold"])
    png = (out_dir / "report.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    assert report.package_written


def test_fewer_than_300_calibration_samples_is_warned(tiny_conversion: tuple[ConversionReport, Path]) -> None:
    report, out_dir = tiny_conversion
    assert any("only 64 samples" in w and "fewer than 300" in w for w in report.warnings)
    assert "fewer than 300" in (out_dir / "report.md").read_text()


def test_accuracy_control_with_a_labelled_validation_set(
    tiny_onnx: Path, tiny_calibration: Path, tmp_path: Path
) -> None:
    import onnxruntime as ort

    x = np.load(tiny_calibration)[:40]
    session = ort.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"])
    y = np.array([int(np.argmax(session.run(None, {"image": s[None]})[0])) for s in x])
    np.savez(tmp_path / "validation.npz", x=x, y=y)
    options = ConvertOptions(
        model=tiny_onnx,
        out_dir=tmp_path / "out",
        calibration=tiny_calibration,
        validation=tmp_path / "validation.npz",
        variants=("openvino/int8", "onnx/fp32"),
        bench_seconds=0,
        drop_threshold=2.5,
    )
    report = convert(options)
    assert report.reference_accuracy is not None and report.reference_accuracy.top1 == 1.0
    row = {r.variant_id: r for r in report.variants}["openvino/int8"]
    assert row.status == "ok" and row.built is not None and row.accuracy is not None
    assert any("accuracy control" in note for note in row.built.notes)
    assert row.drop is not None and row.drop.metric.startswith("top-1 accuracy lost")
    assert row.drop.points == pytest.approx(100 * (1.0 - row.accuracy.top1))
    manifest = open_package(tmp_path / "out").manifest
    assert manifest.task is Task.CLASSIFICATION  # class indices in y make it a classifier
    assert manifest.labels == ()  # an .npz carries class indices, not names
    assert manifest.variants["openvino/int8"].accuracy["top1"] == pytest.approx(row.accuracy.top1, abs=1e-6)
    drop = manifest.variants["openvino/int8"].accuracy_drop  # what selection judges the variant by
    assert drop is not None and drop.threshold == 2.5 and drop.points == pytest.approx(row.drop.points, abs=1e-3)


def test_a_failing_variant_does_not_stop_the_others(tiny_onnx: Path, tiny_calibration: Path, tmp_path: Path) -> None:
    from converters.context import QuantizationSettings

    options = ConvertOptions(
        model=tiny_onnx,
        out_dir=tmp_path / "out",
        calibration=tiny_calibration,
        settings=QuantizationSettings(ignored_scope=("no_such_node_anywhere",)),
        variants=("openvino/int8", "openvino/fp32"),
        bench_seconds=0,
    )
    report = convert(options)
    rows = {r.variant_id: r for r in report.variants}
    assert rows["openvino/int8"].status == "failed"
    assert "no_such_node_anywhere" in rows["openvino/int8"].message
    assert rows["openvino/fp32"].status == "ok"
    assert set(open_package(tmp_path / "out").manifest.variants) == {"openvino/fp32"}
    assert "failed: " in (tmp_path / "out" / "report.md").read_text()


def test_int8_without_calibration_is_skipped_and_synthetic_inputs_are_warned(tiny_onnx: Path, tmp_path: Path) -> None:
    options = ConvertOptions(
        model=tiny_onnx, out_dir=tmp_path / "out", variants=("onnx/int8", "onnx/fp32"), bench_seconds=0
    )
    report = convert(options)
    rows = {r.variant_id: r for r in report.variants}
    assert rows["onnx/int8"].status == "skipped" and "--calibration" in rows["onnx/int8"].message
    assert rows["onnx/fp32"].status == "ok"
    assert any("synthetic inputs" in w for w in report.warnings)


def int8_weight_range(variant_dir: Path) -> tuple[int, int]:
    """The smallest and largest int8 weight stored in an OpenVINO IR or ONNX int8 variant."""
    if (variant_dir / "model.xml").exists():
        import openvino as ov

        ops = ov.Core().read_model(variant_dir / "model.xml").get_ops()
        arrays = [op.get_data() for op in ops if op.get_type_name() == "Constant"]
    else:
        import onnx
        from onnx import numpy_helper

        arrays = [numpy_helper.to_array(i) for i in onnx.load(variant_dir / "model.onnx").graph.initializer]
    weights = np.concatenate([a.ravel().astype(np.int32) for a in arrays if a.dtype == np.int8 and a.size > 1])
    return int(weights.min()), int(weights.max())


def test_int8_weights_keep_to_seven_bits_so_every_cpu_computes_the_same(
    tiny_conversion: tuple[ConversionReport, Path], tiny_onnx: Path, tiny_calibration: Path, tmp_path: Path
) -> None:
    _, out_dir = tiny_conversion
    for variant_id in ("openvino/int8", "onnx/int8"):
        low, high = int8_weight_range(out_dir / variant_id)
        assert low >= -64 and high <= 64 and high - low >= 120, (variant_id, low, high)
    assert "7-bit weights" in (out_dir / "report.md").read_text()
    from converters.context import QuantizationSettings

    options = ConvertOptions(
        model=tiny_onnx,
        out_dir=tmp_path / "out",
        calibration=tiny_calibration,
        settings=QuantizationSettings(full_range_weights=True),
        variants=("openvino/int8", "onnx/int8"),
        bench_seconds=0,
    )
    full = convert(options)
    for variant_id in ("openvino/int8", "onnx/int8"):
        low, high = int8_weight_range(tmp_path / "out" / variant_id)
        assert low <= -127 and high == 127, (variant_id, low, high)
    assert all(any("8-bit weights in every layer" in n for n in r.built.notes) for r in full.variants if r.built)


def test_each_measured_variant_records_the_cpu_that_measured_it(tiny_conversion: tuple[ConversionReport, Path]) -> None:
    from edge_runtime.hardware.cpu import read_cpu

    _, out_dir = tiny_conversion
    cpu = read_cpu(Path("/"))
    variants = open_package(out_dir).manifest.variants
    for variant_id in ALL:
        measured_on = variants[variant_id].measured_on
        assert measured_on is not None and measured_on.int8_features == cpu.int8_features
        assert measured_on.cpu == cpu.model
    data = json.loads((out_dir / "report.json").read_text())
    assert data["measured_on"]["int8_features"] == list(cpu.int8_features)
    assert " ".join(cpu.int8_features) in (out_dir / "report.md").read_text()
    for variant_id in ("openvino/int8", "onnx/int8"):  # the probe's frames lie far outside the calibration range
        assert 0 < variants[variant_id].accuracy["probe_error"] < 1
    assert "probe_error" not in variants["onnx/fp32"].accuracy
