"""Recovery within a budget: with the real NNCF and OpenVINO, on `recovery_models`' two models."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from recovery_models import write_models

from converters.budget import BudgetedValidation, RecoveryBudget
from converters.cache import BuildCache, ConversionCache, source_digest
from converters.calibration import SampleSet
from converters.cli import build_parser, options_from
from converters.context import BuildContext, QuantizationSettings
from converters.errors import ConversionError, VariantSkippedError
from converters.metrics import RunOutputs
from converters.openvino_variants import AccuracyControl, quantize_int8
from converters.pipeline import ConvertOptions, convert
from converters.recovery import agreement_metric, layers
from converters.sources import SourceKind, SourceModel
from edge_runtime.package.loader import open_package
from edge_runtime.package.manifest import Task


class SteppedClock:
    """A clock that moves only when told: what the budget reads, driven by the test instead of the CPU's speed."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_models(tmp_path_factory.mktemp("budget_models"))


def test_the_budget_flags_are_parsed_into_the_settings() -> None:
    defaults = options_from(build_parser().parse_args(["m.onnx", "-o", "out"])).settings
    assert (defaults.recovery_seconds, defaults.recovery_iterations) == (120.0, 20)
    args = build_parser().parse_args(["m.onnx", "-o", "out", "--recovery-budget", "90s", "--recovery-iterations", "3"])
    assert (options_from(args).settings.recovery_seconds, options_from(args).settings.recovery_iterations) == (90, 3)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["m.onnx", "-o", "out", "--recovery-budget", "soon"])
    with pytest.raises(ConversionError, match="--recovery-iterations"):
        options_from(build_parser().parse_args(["m.onnx", "-o", "out", "--recovery-iterations", "0"]))


def _digit_validation(ran: list[str]) -> Callable[[Any, Iterable[tuple[str, int]]], tuple[float, list[float]]]:
    """A validation function for models written as digit strings: item i scores the i-th digit, and
    every model validated is noted in `ran`."""

    def validate(model: Any, batch: Iterable[tuple[str, int]]) -> tuple[float, list[float]]:
        values = [float(model[index]) for _, index in batch]
        ran.append(model)
        return sum(values) / len(values), values

    return validate


def test_once_spent_every_model_scores_as_the_float_one_and_nothing_runs() -> None:
    clock = SteppedClock()
    budget = RecoveryBudget(10.0, 5, clock=clock)
    items = [("a", 0), ("b", 1), ("c", 2)]
    ran: list[str] = []

    validate = _digit_validation(ran)
    validation = BudgetedValidation(validate, len(items), budget)
    assert validation("987", items) == (8.0, [9.0, 8.0, 7.0])  # the float model, first
    assert validation("111", items) == (1.0, [1.0, 1.0, 1.0])  # the plain quantization
    assert validation("222", items) == (2.0, [2.0, 2.0, 2.0])  # one revert
    assert not budget.stopped_control
    clock.now = 10.0
    with pytest.raises(VariantSkippedError, match="before accuracy control reverted any layer"):
        validation("000", items)  # still ranking: nothing to return a model for
    budget.control_reverts = 1  # as NNCF's log line for a revert counts it
    assert validation("000", items) == (8.0, [9.0, 8.0, 7.0])
    assert validation("000", items[1:]) == (7.5, [8.0, 7.0])  # a ranking subset: its items' float values
    assert ran == ["987", "111", "222"] and budget.stopped_control and budget.left() == 0.0


def test_the_caps_last_revert_ends_accuracy_control_without_a_measurement() -> None:
    budget = RecoveryBudget(3600.0, 2, clock=SteppedClock())
    items = [("a", 0), ("b", 1)]
    ran: list[str] = []

    validate = _digit_validation(ran)
    validation = BudgetedValidation(validate, len(items), budget)
    assert validation("98", items) == (8.5, [9.0, 8.0])  # the float model
    budget.control_reverts = 1
    assert validation("12", items) == (1.5, [1.0, 2.0])  # the first revert is measured
    budget.control_reverts = 2  # the cap's last: NNCF hears "restored" and returns the model with it
    assert validation("00", items) == (8.5, [9.0, 8.0])
    assert ran == ["98", "12"] and budget.capped_control and not budget.stopped_control


@pytest.mark.parametrize(("budget_seconds", "stopped"), [(40.0, True), (60.0, False)])
def test_a_re_ranking_that_would_not_end_within_the_budget_is_not_started(budget_seconds: float, stopped: bool) -> None:
    clock = SteppedClock()
    budget = RecoveryBudget(budget_seconds, 20, clock=clock)
    budget.start_control()
    assert budget.pace is not None
    items = [("a", 0), ("b", 1)]

    def validate(model: Any, batch: Iterable[tuple[str, int]]) -> tuple[float, list[float]]:
        clock.now += 2.0  # every evaluation takes 2 s
        values = [float(model) for _ in batch]
        return float(model), values

    validation = BudgetedValidation(validate, len(items), budget)
    validation(9, items)  # the float model
    validation(5, items)  # the quantized one
    budget.pace.line("ORIGINAL metric is used to rank quantizers")
    for _ in range(10):  # 10 groups ranked
        validation(6, items)
    budget.pace.line("Reverted 1 operations to the floating-point precision")
    assert validation(4, items)[0] == 4  # worse, but the first revert is kept whatever it measures
    budget.pace.line("Accuracy drop with the new quantization scope is 5 (absolute)")
    budget.pace.line("Reverted 1 operations to the floating-point precision")
    assert validation(7, items)[0] == 7  # better: kept
    budget.pace.line("Accuracy drop with the new quantization scope is 2 (absolute)")
    budget.pace.line("Reverted 1 operations to the floating-point precision")
    # 30 s spent; worse: NNCF would rank 10 - 3 + 1 = 8 groups again, 16 s, which 40 s of budget cannot hold.
    assert validation(6, items)[0] == (9 if stopped else 6)
    assert budget.stopped_control is stopped and not budget.spent


def _context(models: Path, out_dir: Path, settings: QuantizationSettings) -> tuple[BuildContext, AccuracyControl]:
    """The outlier model's int8 build, held to agreement with its ONNX Runtime outputs on every sample."""
    import onnxruntime as ort

    samples = [[s[None]] for s in np.load(models / "calibration.npy")]
    session = ort.InferenceSession(str(models / "outlier.onnx"), providers=["CPUExecutionProvider"])
    reference = np.stack([session.run(None, {"x": s[0]})[0] for s in samples]).astype(np.float64)
    calibration = SampleSet(samples, "calibration")
    source = SourceModel(models / "outlier.onnx", SourceKind.ONNX)
    ctx = BuildContext(source, out_dir, calibration, None, Task.REGRESSION, settings)
    validate = agreement_metric(RunOutputs(["y"], [reference]), classification=False)
    items: list[tuple[Any, Any]] = [(sample, index) for index, sample in enumerate(samples)]
    return ctx, AccuracyControl(items, validate, 1.0, "agreement", "accuracy control on every sample")


def _timed_out_after_first_revert(
    control: AccuracyControl, clock: SteppedClock, budget: RecoveryBudget
) -> AccuracyControl:
    """Held to no loss at all, so that NNCF goes on reverting; the time runs out as the first revert is measured."""

    def slow(compiled: Any, items: Iterable[tuple[Any, Any]]) -> tuple[float, list[float]]:
        if budget.control_reverts >= 1:
            clock.now += 3600.0
        return control.validate(compiled, items)

    return AccuracyControl(control.items, slow, 0.0, "agreement", "note")


def test_accuracy_control_stopped_by_the_clock_returns_the_model_as_it_stood(models: Path, tmp_path: Path) -> None:
    import openvino as ov

    ctx, control = _context(models, tmp_path, QuantizationSettings())
    clock = SteppedClock()
    budget = RecoveryBudget(10.0, 20, clock=clock)
    built = quantize_int8(ctx, _timed_out_after_first_revert(control, clock, budget), budget)
    # The first revert was measured; NNCF heard "restored" after the next one and stopped there.
    assert budget.stopped_control and budget.control_reverts == 2
    assert any("stopped when its time ran out" in note and "at revert 2;" in note for note in built.notes)
    found = layers(ov.Core().read_model(str(tmp_path / built.files[0])))
    assert sum(not layer.int8 for layer in found if layer.kind == "MatMul") == 2


def test_time_running_out_while_nncf_ranks_abandons_accuracy_control(models: Path, tmp_path: Path) -> None:
    ctx, control = _context(models, tmp_path, QuantizationSettings(recovery_seconds=10.0))
    ctx = replace(ctx, cache=BuildCache(ConversionCache(tmp_path / "cache"), source_digest(models / "outlier.onnx")))
    clock = SteppedClock()
    budget = RecoveryBudget(10.0, 20, clock=clock)
    real = control.validate

    def slow(compiled: Any, items: Iterable[tuple[Any, Any]]) -> tuple[float, list[float]]:
        listed = list(items)
        if len(listed) == len(control.items):  # the float model and the plain int8 are measured, then time is up
            clock.now += 6.0
        return real(compiled, listed)

    with pytest.raises(VariantSkippedError, match="before accuracy control reverted any layer"):
        quantize_int8(ctx, AccuracyControl(control.items, slow, 1.0, "agreement", "note"), budget)
    assert budget.stopped_control and budget.control_reverts == 0
    # The same conversion with the same budget: abandoned again at once, from the cache, though 10 s of this
    # machine's own time would now be enough for the whole of accuracy control on so small a model.
    with pytest.raises(VariantSkippedError, match="before accuracy control reverted any layer"):
        quantize_int8(replace(ctx, out_dir=tmp_path / "again"), control, RecoveryBudget(10.0, 20))
    unbounded = RecoveryBudget(3600.0, 20)
    larger = replace(ctx, out_dir=tmp_path / "unbounded", settings=QuantizationSettings(recovery_seconds=3600.0))
    quantize_int8(larger, control, unbounded)
    assert not unbounded.stopped_control and unbounded.control_reverts >= 1


def test_a_spent_budget_keeps_the_first_try_and_says_what_a_larger_one_would_try(models: Path, tmp_path: Path) -> None:
    options = ConvertOptions(
        model=models / "offset.onnx",
        out_dir=tmp_path / "out",
        calibration=models / "calibration.npy",
        variants=("openvino/int8",),
        drop_threshold=1.0,
        bench_seconds=0.05,
        settings=QuantizationSettings(recovery_seconds=0.0),
    )
    result = convert(options).variants[0]
    assert [(a.name, a.status) for a in result.attempts] == [
        ("initial", "flagged"),
        ("mixed preset", "skipped"),
        ("full bias correction", "skipped"),
        ("accuracy control", "skipped"),
    ]
    assert result.attempts[0].kept and result.flagged  # flagged as without recovery
    assert all("the budget" in a.message for a in result.attempts[1:])
    expected = "a larger --recovery-budget would try next: mixed preset, full bias correction, accuracy control"
    assert expected in result.recovery_note
    assert expected in (tmp_path / "out" / "report.md").read_text()
    row = json.loads((tmp_path / "out" / "report.json").read_text())["variants"][0]
    assert row["recovery_note"] == result.recovery_note
    assert open_package(tmp_path / "out").manifest.variants["openvino/int8"].accuracy["drop_points"] > 1.0


def test_an_iteration_cap_is_what_nncf_may_revert(models: Path, tmp_path: Path) -> None:
    import openvino as ov

    ctx, control = _context(models, tmp_path, QuantizationSettings())
    # Held to no loss at all, accuracy control would revert every layer; a cap of one stops it after the first.
    capped = RecoveryBudget(3600.0, 1)
    measured_after_the_cap = []

    def validate(compiled: Any, items: Iterable[Any]) -> tuple[float, list[float]]:
        measured_after_the_cap.append(capped.capped_control)
        return control.validate(compiled, items)

    nncf_log = logging.getLogger("nncf")
    level = nncf_log.level
    nncf_log.setLevel(logging.WARNING)  # as a program that quiets NNCF leaves it: reverts are still counted
    try:
        built = quantize_int8(ctx, AccuracyControl(control.items, validate, 0.0, "agreement", "note"), capped)
    finally:
        nncf_log.setLevel(level)
    assert capped.capped_control and capped.control_reverts == 1 and not capped.stopped_control
    assert measured_after_the_cap and not any(measured_after_the_cap)  # its one revert was not measured
    found = layers(ov.Core().read_model(str(tmp_path / built.files[0])))
    assert sum(not layer.int8 for layer in found if layer.kind == "MatMul") == 1


def test_a_control_the_clock_stopped_is_reused_only_with_the_same_budget(models: Path, tmp_path: Path) -> None:
    ctx, control = _context(models, tmp_path / "first", QuantizationSettings(recovery_seconds=10.0))
    ctx = replace(ctx, cache=BuildCache(ConversionCache(tmp_path / "cache"), source_digest(models / "outlier.onnx")))
    clock = SteppedClock()
    stopped = RecoveryBudget(10.0, 20, clock=clock)
    built = quantize_int8(ctx, _timed_out_after_first_revert(control, clock, stopped), stopped)
    assert stopped.stopped_control
    again = RecoveryBudget(10.0, 20)
    held_to_nothing = AccuracyControl(control.items, control.validate, 0.0, "agreement", "note")
    from_cache = quantize_int8(replace(ctx, out_dir=tmp_path / "again"), held_to_nothing, again)
    assert again.stopped_control and from_cache.notes == built.notes
    assert (tmp_path / "again" / built.files[1]).read_bytes() == (tmp_path / "first" / built.files[1]).read_bytes()
    larger = replace(ctx, out_dir=tmp_path / "larger", settings=QuantizationSettings(recovery_seconds=3600.0))
    unstopped = RecoveryBudget(3600.0, 20)
    quantize_int8(larger, control, unstopped)
    assert not unstopped.stopped_control and unstopped.control_reverts >= 1  # run again, to the end
