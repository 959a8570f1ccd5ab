"""A flagged openvino/int8 variant is quantized again, with the real NNCF and OpenVINO, until one attempt holds.

The models are `recovery_models`': `offset` is fixed by full bias correction, `outlier` only by accuracy control.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from recovery_models import SAMPLES, convert_int8, write_models

from converters.calibration import SampleSet
from converters.cli import build_parser, options_from
from converters.context import BuildContext, QuantizationSettings
from converters.metrics import Accuracy, RunOutputs
from converters.recovery import agreement_metric, layers, plan, recovery_control
from converters.report import VariantResult
from converters.sources import SourceKind, SourceModel
from converters.variant_evaluation import Reference
from edge_runtime.package.loader import open_package, sha256_of
from edge_runtime.package.manifest import Task
from edge_runtime.placement.model import load_model

AGREEMENT = "100 − mean error in % of fp32 output range"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_models(tmp_path_factory.mktemp("recovery_models"))


@pytest.fixture(scope="module")
def bias_fixed(models: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[VariantResult, Path]:
    out_dir = tmp_path_factory.mktemp("bias_fixed")
    return convert_int8(models, "offset", out_dir).variants[0], out_dir


@pytest.fixture(scope="module")
def control_fixed(models: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[VariantResult, Path]:
    out_dir = tmp_path_factory.mktemp("control_fixed")
    return convert_int8(models, "outlier", out_dir).variants[0], out_dir


def _reference(models: Path, name: str) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(models / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    samples = np.load(models / "calibration.npy")
    return np.stack([session.run(None, {"x": s[None]})[0] for s in samples]).astype(np.float64)


def _package_drop(models: Path, name: str, out_dir: Path) -> float:
    """The packaged int8 variant's drop, run through the runtime and measured here against ONNX Runtime."""
    reference = _reference(models, name)
    model = load_model(open_package(out_dir), "openvino/int8", "openvino")
    try:
        got = np.stack([model.infer([s[None]])[0] for s in np.load(models / "calibration.npy")]).astype(np.float64)
    finally:
        model.close()
    return float(100 * np.abs(got.reshape(reference.shape) - reference).mean() / (reference.max() - reference.min()))


def test_a_flagged_variant_goes_through_the_attempts_and_stops_at_the_first_within(
    bias_fixed: tuple[VariantResult, Path],
) -> None:
    result, out_dir = bias_fixed
    attempts = result.attempts
    assert [a.name for a in attempts] == ["initial", "mixed preset", "full bias correction"]
    assert [a.status for a in attempts] == ["flagged", "flagged", "ok"]
    assert [a.kept for a in attempts] == [False, False, True]
    assert [(a.settings["preset"], a.settings["fast_bias_correction"]) for a in attempts] == [
        ("performance", True),
        ("mixed", True),
        ("mixed", False),
    ]
    assert all(a.settings["full_range_weights"] is False for a in attempts)  # 7-bit weights in every attempt
    assert attempts[0].drop_points is not None and attempts[0].drop_points > 2.0
    assert attempts[2].drop_points is not None and attempts[2].drop_points < 1.0
    for attempt in attempts:
        assert attempt.latency_median_ms is not None and attempt.latency_median_ms > 0
        assert attempt.throughput_fps is not None and attempt.throughput_fps > 0
        assert attempt.layers_fp32 == []  # plain quantizations keep every layer NNCF quantizes in int8
    assert not result.flagged and result.drop is not None and result.drop.points == attempts[2].drop_points
    data = json.loads((out_dir / "report.json").read_text())
    row = data["variants"][0]
    assert [a["status"] for a in row["attempts"]] == ["flagged", "flagged", "ok"]
    assert row["attempts"][2]["drop_points"] == pytest.approx(attempts[2].drop_points)
    assert set(row["attempts"][0]) >= {"name", "settings", "drop_points", "latency_median_ms", "throughput_fps"}
    markdown = (out_dir / "report.md").read_text()
    assert "## Recovery" in markdown
    assert "kept attempt 3 (full bias correction), the first within the threshold" in markdown
    assert "| 3 | full bias correction | mixed | False | – |" in markdown


def test_the_kept_attempt_is_the_packaged_variant(models: Path, control_fixed: tuple[VariantResult, Path]) -> None:
    import openvino as ov

    result, out_dir = control_fixed
    kept = [a for a in result.attempts if a.kept]
    assert [a.name for a in kept] == ["accuracy control"] and kept[0].status == "ok"
    assert kept[0].drop_points is not None and kept[0].drop_points <= 1.0
    assert all(a.status == "flagged" for a in result.attempts[:3])
    variant = open_package(out_dir).manifest.variants["openvino/int8"]
    for entry in variant.files:
        assert sha256_of(out_dir / entry.path) == entry.sha256
    assert variant.accuracy["drop_points"] == pytest.approx(kept[0].drop_points, abs=1e-3)
    assert not result.flagged and result.built is not None
    assert any("attempt 4 (accuracy control) was kept" in note for note in result.built.notes)
    # The files hold accuracy control's model: the head in float, the hidden layer in int8, and the drop it had.
    model = ov.Core().read_model(str(out_dir / "openvino/int8/model.xml"))
    found = {layer.name: layer.int8 for layer in layers(model)}
    assert found["hidden/WithoutBiases"] and not found["head/WithoutBiases"]
    weights = [op.get_data() for op in model.get_ops() if op.get_type_name() == "Constant"]
    int8 = np.concatenate([w.ravel().astype(np.int32) for w in weights if w.dtype == np.int8 and w.size > 1])
    assert int8.min() >= -64 and int8.max() <= 64 and max(-int8.min(), int8.max()) >= 60  # still 7-bit weights
    assert _package_drop(models, "outlier", out_dir) == pytest.approx(kept[0].drop_points, abs=1e-3)


def test_without_labels_agreement_with_fp32_drives_accuracy_control(
    models: Path, control_fixed: tuple[VariantResult, Path]
) -> None:
    import openvino as ov

    result, out_dir = control_fixed
    control = result.attempts[3]
    assert control.settings["accuracy_control"] == AGREEMENT
    assert control.settings["max_drop"] == 1.0  # the drop threshold, in the same points
    assert control.settings["validation_samples"] == SAMPLES // 4
    assert control.settings["calibration_samples"] == SAMPLES - SAMPLES // 4
    assert control.layers_fp32 == ["head/WithoutBiases (MatMul)"]
    assert "## Recovery" in (out_dir / "report.md").read_text()
    assert "- attempt 4 (accuracy control): `head/WithoutBiases (MatMul)`" in (out_dir / "report.md").read_text()
    # The metric is the converter's drop turned around: on every sample it scores the packaged variant 100 - drop.
    samples = [[s[None]] for s in np.load(models / "calibration.npy")]
    validate = agreement_metric(RunOutputs(["y"], [_reference(models, "outlier")]), classification=False)
    items = [(sample, index) for index, sample in enumerate(samples)]
    core = ov.Core()
    # At f32, as NNCF compiles what it validates: a CPU with BF16 would otherwise run the float head in bf16.
    f32 = {"INFERENCE_PRECISION_HINT": "f32"}
    metric, values = validate(core.compile_model(str(out_dir / "openvino/int8/model.xml"), "CPU", f32), items)
    assert len(values) == SAMPLES and min(values) < max(values) <= 100.0
    alone, _ = validate(core.compile_model(str(out_dir / "openvino/int8/model.xml"), "CPU", f32), items[:1])
    assert alone == pytest.approx(values[0])  # how NNCF scores samples one by one to rank the layers
    assert metric == pytest.approx(100 - _package_drop(models, "outlier", out_dir), abs=1e-3)
    fp32, _ = validate(core.compile_model(ov.convert_model(str(models / "outlier.onnx")), "CPU", f32), items)
    assert fp32 == pytest.approx(100.0, abs=1e-3)


def test_nothing_within_the_threshold_keeps_the_smallest_drop_and_stays_flagged(models: Path, tmp_path: Path) -> None:
    result = convert_int8(models, "offset", tmp_path / "out", 0.0).variants[0]
    attempts = result.attempts
    assert [a.name for a in attempts] == ["initial", "mixed preset", "full bias correction", "accuracy control"]
    assert all(a.status in ("flagged", "failed") for a in attempts)
    assert all(a.drop_points is not None and a.latency_median_ms is not None for a in attempts)
    # Held to no loss at all, accuracy control reverts every layer: a float model is not an int8 variant.
    assert attempts[3].status == "failed" and attempts[3].message == "no layer is left in int8"
    measured = [a for a in attempts if a.status == "flagged"]
    best = min(measured, key=lambda a: a.drop_points or 0.0)
    assert [a.kept for a in attempts] == [a is best for a in attempts]
    assert result.flagged and result.drop is not None and result.drop.points == best.drop_points
    assert _package_drop(models, "offset", tmp_path / "out") == pytest.approx(best.drop_points, abs=1e-3)
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "no attempt came within the threshold" in markdown and "the variant stays flagged" in markdown
    assert "FLAG: do not ship" in markdown


def test_no_recovery_leaves_a_flagged_variant_as_built(models: Path, tmp_path: Path) -> None:
    args = build_parser().parse_args(["m.onnx", "-o", "out", "--no-recovery"])
    assert options_from(args).recover is False
    assert options_from(build_parser().parse_args(["m.onnx", "-o", "out"])).recover is True
    result = convert_int8(models, "outlier", tmp_path / "out", recover=False).variants[0]
    assert result.flagged and result.attempts == []
    assert "## Recovery" not in (tmp_path / "out" / "report.md").read_text()


def _context(calibration: SampleSet, validation: SampleSet | None, task: Task) -> BuildContext:
    source = SourceModel(Path("model.onnx"), SourceKind.ONNX)
    return BuildContext(source, Path("out"), calibration, validation, task, QuantizationSettings())


def test_labelled_classifiers_are_held_to_top1_and_others_to_held_back_samples() -> None:
    rng = np.random.default_rng(0)
    calibration = SampleSet([[rng.normal(size=(1, 4))] for _ in range(20)], "calibration")
    validation = SampleSet([[rng.normal(size=(1, 4))] for _ in range(8)], "validation", labels=np.arange(8) % 3)
    outputs = RunOutputs(["scores"], [rng.normal(size=(8, 1, 3))])
    labelled = recovery_control(
        _context(calibration, validation, Task.CLASSIFICATION),
        Reference(outputs, validation.labels, Accuracy(0.5, None)),
        validation,
        2.0,
    )
    assert not isinstance(labelled, str)
    control, used = labelled
    assert control.metric == "top-1 accuracy, as a fraction" and control.max_drop == pytest.approx(0.02)
    assert [label for _, label in control.items] == list(validation.labels) and used is calibration
    zero = Reference(outputs, validation.labels, Accuracy(0.0, None))
    assert isinstance(
        recovery_control(_context(calibration, validation, Task.CLASSIFICATION), zero, validation, 2.0), str
    )
    held_back = recovery_control(
        _context(calibration, None, Task.REGRESSION),
        Reference(RunOutputs(["y"], [rng.normal(size=(20, 1, 2))]), None),
        calibration,
        1.5,
    )
    assert not isinstance(held_back, str)
    control, used = held_back
    assert control.metric == AGREEMENT and control.max_drop == 1.5
    held = {id(sample) for sample, _ in control.items}
    assert len(held) == 5 and len(used) == 15 and held.isdisjoint(id(sample) for sample in used.samples)
    assert {index for _, index in control.items} == {i for i, s in enumerate(calibration.samples) if id(s) in held}


def test_the_plan_keeps_each_change_and_adds_accuracy_control_once() -> None:
    steps = plan(QuantizationSettings(), controlled=False)
    assert [(s.name, s.settings.preset, s.settings.fast_bias_correction, s.controlled) for s in steps] == [
        ("mixed preset", "mixed", True, False),
        ("full bias correction", "mixed", False, False),
        ("accuracy control", "mixed", False, True),
    ]
    done = QuantizationSettings(preset="mixed", fast_bias_correction=False, full_range_weights=True)
    assert [(s.name, s.settings) for s in plan(done, controlled=False)] == [("accuracy control", done)]
    assert [s.controlled for s in plan(QuantizationSettings(), controlled=True)] == [True, True]
