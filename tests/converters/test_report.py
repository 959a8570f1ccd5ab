"""The report's rows and verdicts, built from results with known numbers."""

from __future__ import annotations

import json
from pathlib import Path

from converters.context import BuiltVariant, QuantizationSettings
from converters.detection_metrics import DetectionAccuracy
from converters.evaluate import Speed
from converters.metrics import Accuracy, Agreement, Drop, OutputAgreement
from converters.report import ConversionReport, VariantResult, markdown, verdict, write_report
from edge_runtime.measure.benchmark import LatencyStats, ThroughputStats
from edge_runtime.package.manifest import MeasuredOn, ModelFormat, Precision


def _result(variant_id: str, drop: float, flagged: bool, size: int) -> VariantResult:
    agreement = Agreement((OutputAgreement("scores", 0.5, 0.01, 0.998, 0.002),), 0.97)
    return VariantResult(
        variant_id,
        built=BuiltVariant(ModelFormat.OPENVINO, Precision.INT8, (f"{variant_id}/model.xml",), ("a note",)),
        size_bytes=size,
        sparsity=0.25,
        agreement=agreement,
        accuracy=Accuracy(0.9 - drop / 100, 0.99),
        drop=Drop(drop, "top-1 accuracy lost, in points"),
        speed=Speed(LatencyStats(10, 1.5, 1.8, 2.0, 1.6, 1.2), ThroughputStats(100, 2, 1234.5)),
        flagged=flagged,
    )


def _report() -> ConversionReport:
    failed = VariantResult("onnx/int8")
    failed.fail("failed", "RuntimeError: broken | pipe")
    return ConversionReport(
        name="demo",
        source="onnx model demo.onnx",
        reference="demo.onnx on onnxruntime:CPU at fp32",
        evaluated_on="100 samples",
        calibration="100 samples",
        settings=QuantizationSettings(),
        measured_on=MeasuredOn(cpu="Intel(R) Xeon(R) Platinum 8480+", int8_features=("x86_64", "amx", "avx2")),
        drop_threshold=1.0,
        bench_seconds=1.0,
        reference_accuracy=Accuracy(0.9, 0.99),
        warnings=["few samples"],
        variants=[_result("openvino/fp32", 0.0, False, 4000), _result("openvino/int8", 2.5, True, 1000), failed],
        package_written=True,
    )


def test_verdicts() -> None:
    report = _report()
    fp32, int8, failed = report.variants
    assert verdict(fp32, 1.0) == "ok"
    assert verdict(int8, 1.0) == "FLAG: do not ship (drop 2.50 > 1 points)"
    assert verdict(failed, 1.0) == "failed: RuntimeError: broken | pipe"


def test_markdown_has_one_row_per_variant_with_the_figures() -> None:
    text = markdown(_report())
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == 3
    assert rows[1].startswith("| `openvino/int8` | 1.0 KiB | 25.0 | 87.50 | 99.00 | 2.50 |")
    assert "FLAG: do not ship" in rows[1] and "1.500" in rows[1] and "1234.5" in rows[1]
    assert "broken \\| pipe" in rows[2]  # a pipe in a message must not split the table row
    assert "Reference accuracy: top-1 90.00%, top-5 99.00%" in text
    assert "- few samples" in text and "- `openvino/fp32`: a note" in text
    assert "- Measured on: Intel(R) Xeon(R) Platinum 8480+ (int8 features: x86_64 amx avx2)" in text


def test_the_probe_error_of_int8_variants_is_reported_and_recorded() -> None:
    report = _report()
    report.variants[1].probe_error = 0.012345
    assert "`openvino/int8`: mean output error against fp32 on the fidelity probe's inputs 1.23%" in markdown(report)
    assert report.variants[1].manifest_accuracy()["probe_error"] == 0.012345
    assert "probe_error" not in report.variants[0].manifest_accuracy()


def test_written_files(tmp_path: Path) -> None:
    write_report(_report(), tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    assert [row["status"] for row in data["variants"]] == ["ok", "ok", "failed"]
    assert data["variants"][1]["flagged"] is True
    assert data["variants"][1]["agreement"]["cosine"] == 0.998
    assert data["variants"][0]["files"] == ["openvino/fp32/model.xml"]
    assert data["measured_on"] == {"cpu": "Intel(R) Xeon(R) Platinum 8480+", "int8_features": ["x86_64", "amx", "avx2"]}
    assert (tmp_path / "report.png").read_bytes().startswith(b"\x89PNG")
    assert "# Conversion report: demo" in (tmp_path / "report.md").read_text()


def _detection_report() -> ConversionReport:
    report = _report()
    report.reference_accuracy = None
    report.reference_detection = DetectionAccuracy(0.8, {"car": 0.9, "person": 0.7}, images=50, objects=120)
    fp32, int8, _ = report.variants
    fp32.accuracy = int8.accuracy = None
    fp32.detection = DetectionAccuracy(0.8, {"car": 0.9, "person": 0.7}, images=50, objects=120)
    int8.detection = DetectionAccuracy(0.775, {"car": 0.885, "person": 0.665}, images=50, objects=120)
    int8.drop = Drop(2.5, "mAP@0.5 lost, in points")
    return report


def test_detection_report_has_a_map_column_and_ap_per_class() -> None:
    text = markdown(_detection_report())
    header = next(line for line in text.splitlines() if line.startswith("| Variant |"))
    assert "| Top-5 % | mAP@0.5 % | Drop (points) |" in header
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows[1].startswith("| `openvino/int8` | 1.0 KiB | 25.0 | – | – | 77.50 | 2.50 |")
    assert rows[2].replace("\\|", "").count("|") == header.count("|")  # the failed row has the mAP cell too
    assert "- Reference mAP@0.5: 80.00% on 50 images with 120 annotated boxes" in text
    assert "| Model | car | person |" in text
    assert "| `openvino/int8` | 88.50 | 66.50 |" in text and "| reference | 90.00 | 70.00 |" in text
    assert "mAP@0.5" not in markdown(_report())  # classifiers keep their table


def test_detection_figures_go_into_json_and_manifest_accuracy(tmp_path: Path) -> None:
    report = _detection_report()
    write_report(report, tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["reference_detection"]["per_class"] == {"car": 0.9, "person": 0.7}
    assert data["variants"][1]["detection"]["map50"] == 0.775
    assert report.variants[1].manifest_accuracy()["map50"] == 0.775
    assert (tmp_path / "report.png").read_bytes().startswith(b"\x89PNG")
