"""A flagged `openvino/int8` variant is quantized again in better ways before the converter gives up on it.

The first quantization is NNCF's cheapest: symmetric activations and fast bias correction. When it loses
more than the drop threshold, the converter tries what costs more, in order, each attempt keeping the
previous one's changes:

1. the `mixed` preset: asymmetric activations, for activations whose range is far from symmetric;
2. full bias correction (`fast_bias_correction=False`): the fast one leaves alone any bias it would move by
   more than twice its value, which is exactly where quantization shifts a layer's output the most;
3. accuracy control: NNCF ranks the layers by what quantizing them costs and reverts the worst to float
   until the drop is within the threshold. The metric is top-1 on a labelled validation set where there
   is one; otherwise agreement with the fp32 reference's outputs on samples held back from calibration,
   which the converter can measure for any task (landmarks, regression, detection).

Each attempt is built in a scratch folder and evaluated as the pipeline evaluates every variant (the same
drop and speed measurement). The first attempt within the threshold is kept; when none is, the smallest
drop is kept and the variant stays flagged. The report lists every attempt with its figures and the
layers it kept in fp32. Weights keep the configured range (7 bits by default) in every attempt.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from converters.budget import RecoveryBudget, budget_summary, control_outcome
from converters.calibration import Sample, SampleSet
from converters.context import BuildContext, Builder, QuantizationSettings, model_input
from converters.metrics import RunOutputs, match_outputs
from converters.openvino_variants import (
    AccuracyControl,
    advanced_parameters,
    float32_weights,
    quantization_options,
    quantize_int8,
    top1_control,
)
from converters.progress import current_schedule, stage, step
from converters.report import Attempt, VariantResult
from edge_runtime.package.manifest import Task

if TYPE_CHECKING:
    from converters.variant_evaluation import Reference

VARIANT = "openvino/int8"
HELD_BACK_SHARE = 0.25  # of the calibration samples, when they are also the evaluation set
# Ops between a low-precision weight constant and the layer reading it (NNCF's weight decompression).
_DECOMPRESSION = frozenset({"Convert", "Subtract", "Multiply", "Reshape", "Transpose", "Unsqueeze"})
_NOT_LAYERS = _DECOMPRESSION | {"Constant", "FakeQuantize", "Parameter", "Result"}

TryVariant = Callable[[BuildContext, str, Builder], VariantResult]


@dataclass(frozen=True)
class Step:
    """One attempt after the first: its name in the report and the settings it quantizes with."""

    name: str
    settings: QuantizationSettings
    controlled: bool  # quantized with accuracy control


@dataclass
class _Tried:
    attempt: Attempt
    result: VariantResult
    root: Path  # the folder the result's files are relative to


def needs_recovery(result: VariantResult) -> bool:
    return result.variant_id == VARIANT and result.status == "ok" and result.flagged


def plan(settings: QuantizationSettings, controlled: bool) -> list[Step]:
    """The attempts after the first, cheapest first; each keeps the changes of the one before.

    A first try that already had accuracy control (a labelled validation set) keeps it in every attempt,
    held to the converter's threshold instead of `--max-drop`.
    """
    steps = []
    if settings.preset == "performance":
        settings = replace(settings, preset="mixed")
        steps.append(Step("mixed preset", settings, controlled))
    if settings.fast_bias_correction:
        settings = replace(settings, fast_bias_correction=False)
        steps.append(Step("full bias correction", settings, controlled))
    if not controlled:
        steps.append(Step("accuracy control", settings, True))
    return steps


def recover_int8(
    ctx: BuildContext,
    result: VariantResult,
    reference: Reference,
    eval_set: SampleSet,
    drop_threshold: float,
    try_variant: TryVariant,
    scratch: Path,
) -> None:
    """Try the plan's attempts on a flagged `result`, keep the best in `ctx.out_dir`, and list them all in it."""
    assert result.drop is not None and ctx.calibration is not None
    budget = RecoveryBudget(ctx.settings.recovery_seconds, ctx.settings.recovery_iterations)
    step(f"{VARIANT}: drop {result.drop.points:.2f} over {drop_threshold:g} points: quantizing again")
    plain = plain_int8_layers(ctx)
    first_control = _first_control(ctx)
    first_settings = _settings(ctx.settings, len(ctx.calibration), first_control)
    first = _Tried(Attempt("initial", first_settings, ""), result, ctx.out_dir)
    _measured(first, plain)
    tried = [first]
    control = recovery_control(ctx, reference, eval_set, drop_threshold)
    steps = plan(ctx.settings, first_control is not None)
    schedule = current_schedule()
    if schedule is not None:
        names = [(f"attempt {n}: {s.name}", s.controlled) for n, s in enumerate(steps, 2)]
        schedule.plan_recovery(names, budget.left())
    for number, planned in enumerate(steps, 2):
        accuracy, calibration = None, ctx.calibration
        if budget.spent:
            for late in steps[number - 2 :]:
                settings = _settings(late.settings, len(ctx.calibration), None)
                why = f"not tried: the budget ({budget.describe()}) ran out"
                tried.append(_Tried(Attempt(late.name, settings, "skipped", why), result, ctx.out_dir))
            break
        if planned.controlled:
            if isinstance(control, str):
                settings = _settings(planned.settings, len(ctx.calibration), None)
                tried.append(_Tried(Attempt(planned.name, settings, "skipped", control), result, ctx.out_dir))
                continue
            accuracy, calibration = control
        root = scratch / f"attempt-{number}"
        stage(f"attempt {number}: {planned.name}")
        attempt_ctx = replace(ctx, out_dir=root, settings=planned.settings, calibration=calibration)
        step(f"{VARIANT}: attempt {number} of {len(steps) + 1}: {planned.name} ({budget.left():.0f} s of budget left)")
        attempt_result = try_variant(attempt_ctx, VARIANT, partial(quantize_int8, control=accuracy, budget=budget))
        if schedule is not None:
            schedule.begin_nothing()  # measured: the ETA stops counting this attempt
        settings = _settings(planned.settings, len(calibration), accuracy)
        tried.append(_Tried(Attempt(planned.name, settings, ""), attempt_result, root))
        _measured(tried[-1], plain)
        if accuracy is not None and tried[-1].attempt.status == "flagged":
            tried[-1].attempt.message = control_outcome(budget)
        step(f"{VARIANT}: attempt {number} ({planned.name}): {_outcome(tried[-1].attempt)}")
        if tried[-1].attempt.status == "ok":
            break
    if schedule is not None:
        schedule.end_recovery()
    kept = _pick(tried)
    kept.attempt.kept = True
    if kept is not first:
        _adopt(ctx.out_dir, kept, result, tried.index(kept) + 1)
    result.attempts = [t.attempt for t in tried]
    result.recovery_note = budget_summary(budget, [t.attempt for t in tried])


def recovery_control(
    ctx: BuildContext, reference: Reference, eval_set: SampleSet, drop_threshold: float
) -> tuple[AccuracyControl, SampleSet] | str:
    """The accuracy control of the controlled attempts and the calibration they use, or why there is none.

    `max_drop` is the converter's threshold in the metric's units, so NNCF stops where the flag would.
    """
    assert ctx.calibration is not None
    if ctx.accuracy_control and ctx.validation is not None and ctx.validation.labels is not None:
        if reference.accuracy is not None and reference.accuracy.top1 == 0.0:
            return "the fp32 model classifies no validation sample correctly: there is no accuracy to keep"
        return top1_control(ctx.validation, ctx.validation.labels, drop_threshold / 100), ctx.calibration
    calibration, where = ctx.calibration, f"{len(eval_set)} validation samples"
    held = list(range(len(eval_set)))
    if eval_set is ctx.calibration:  # no validation set: hold some calibration samples back to judge by
        if len(eval_set) < 2:
            return "accuracy control needs at least 2 calibration samples, to hold some back from calibration"
        rng = np.random.default_rng(ctx.settings.seed)
        count = max(1, round(HELD_BACK_SHARE * len(eval_set)))
        held = sorted(int(i) for i in rng.choice(len(eval_set), size=count, replace=False))
        held_back = set(held)
        rest = [s for i, s in enumerate(eval_set.samples) if i not in held_back]
        calibration = SampleSet(rest, f"{len(rest)} of {ctx.calibration.origin}")
        where = f"{count} samples held back from calibration"
    classification = ctx.task is Task.CLASSIFICATION
    metric = "top-1 agreement with fp32, in %" if classification else "100 − mean error in % of fp32 output range"
    note = f"accuracy control: {metric}, max drop {drop_threshold:g} points, on {where}"
    items: list[tuple[Sample, Any]] = [(eval_set.samples[i], i) for i in held]
    validate = agreement_metric(reference.outputs, classification)
    return AccuracyControl(items, validate, drop_threshold, metric, note), calibration


def agreement_metric(
    reference: RunOutputs, classification: bool
) -> Callable[[Any, Iterable[tuple[Sample, Any]]], tuple[float, list[float]]]:
    """NNCF's validation function: agreement with the fp32 reference, in points, higher is better.

    It is the converter's drop turned around: 100 minus the share of samples whose class changed
    (classifiers), or 100 minus the mean output error in % of the reference output's range over the whole
    evaluation set (fixed, so that one sample alone scores as it does among the others, as NNCF's ranking
    needs). Items are (sample, index into the reference outputs). The float model scores about 100: not 0,
    which NNCF would divide by.
    """
    ranges = [float(array.max() - array.min()) or 1.0 for array in reference.arrays]

    def validate(compiled: Any, items: Iterable[tuple[Sample, Any]]) -> tuple[float, list[float]]:
        ports = list(compiled.outputs)
        names = [port.get_any_name() if port.get_names() else f"output_{i}" for i, port in enumerate(ports)]
        order = match_outputs(reference.names, names)
        values: list[float] = []
        errors: list[list[float]] = []
        for sample, index in items:
            produced = compiled(model_input(sample))
            outputs = [np.asarray(produced[ports[j]], np.float64) for j in order]
            expected = [array[index] for array in reference.arrays]
            if classification:
                same = np.argmax(outputs[0].reshape(-1)) == np.argmax(expected[0].reshape(-1))
                values.append(100.0 if same else 0.0)
                continue
            error = [
                float(np.abs(got.reshape(want.shape) - want).mean()) / span
                for got, want, span in zip(outputs, expected, ranges, strict=True)
            ]
            errors.append(error)
            values.append(100.0 - 100.0 * max(error))
        if not values:
            return 0.0, values
        if classification:
            return float(np.mean(values)), values
        return 100.0 - 100.0 * float(np.max(np.mean(errors, axis=0))), values

    return validate


@dataclass(frozen=True)
class Layer:
    """An op of a quantized model, under a key that is the same in every quantization of one source model.

    Op names cannot be that key: OpenVINO numbers the ops of a converted TFLite model from a counter that
    runs on with every conversion in the process. The order of a layer among the ops of its type can: NNCF
    only inserts quantizers and weight decompression, which are not counted, between them.
    """

    key: str
    name: str
    kind: str  # the op's type
    int8: bool  # reads a quantized activation or low-precision weights

    @property
    def label(self) -> str:
        """The name, with the type where the name does not start with it (a TFLite Add may be `Transpose_12`)."""
        return self.name if self.name.startswith(self.kind) else f"{self.name} ({self.kind})"


def layers(model: Any) -> list[Layer]:
    """The model's ops in graph order, but for constants, quantizers and weight decompression."""
    counts: dict[str, int] = {}
    found = []
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind in _NOT_LAYERS:
            continue
        counts[kind] = counts.get(kind, 0) + 1
        producers = [op.input_value(i).get_node() for i in range(op.get_input_size())]
        int8 = any(p.get_type_name() == "FakeQuantize" or _low_precision_weights(p) for p in producers)
        found.append(Layer(f"{kind}#{counts[kind]}", op.get_friendly_name(), kind, int8))
    return found


def plain_int8_layers(ctx: BuildContext) -> set[str]:
    """The keys of the layers a plain NNCF quantization with `ctx`'s settings runs in int8.

    What "kept in fp32" is measured from. Where NNCF puts its quantizers does not depend on the data, so
    one sample and no bias correction do; for the same reason the cache keeps the answer under the model
    and the settings alone.
    """
    if ctx.cache is None:
        return _plain_int8_layers(ctx)
    key = ctx.cache.key("openvino/int8 plain layers", ctx.settings, "any")
    return set(ctx.cache.store.value(key, lambda: sorted(_plain_int8_layers(ctx))))


def _plain_int8_layers(ctx: BuildContext) -> set[str]:
    import nncf

    assert ctx.calibration is not None
    parameters = replace(advanced_parameters(ctx.settings), disable_bias_correction=True)
    quantized = nncf.quantize(
        float32_weights(ctx.source.openvino_model()),
        nncf.Dataset(ctx.calibration.samples[:1], model_input),
        advanced_parameters=parameters,
        **quantization_options(ctx.settings, 1),
    )
    return {layer.key for layer in layers(quantized) if layer.int8}


def _low_precision_weights(node: Any) -> bool:
    import openvino as ov

    for _ in range(len(_DECOMPRESSION)):
        if node.get_type_name() == "Constant":
            return node.get_element_type() in (ov.Type.i8, ov.Type.u8, ov.Type.i4, ov.Type.u4)
        if node.get_type_name() not in _DECOMPRESSION:
            return False
        node = node.input_value(0).get_node()
    return False


def _first_control(ctx: BuildContext) -> AccuracyControl | None:
    """The accuracy control `build_int8` used, to describe the first attempt."""
    if ctx.accuracy_control and ctx.validation is not None and ctx.validation.labels is not None:
        return top1_control(ctx.validation, ctx.validation.labels, ctx.settings.max_drop)
    return None


def _settings(
    settings: QuantizationSettings, calibration_samples: int, control: AccuracyControl | None
) -> dict[str, str | int | float | bool | None]:
    return {
        "preset": settings.preset,
        "fast_bias_correction": settings.fast_bias_correction,
        "full_range_weights": settings.full_range_weights,
        "calibration_samples": min(settings.subset_size, calibration_samples),
        "accuracy_control": None if control is None else control.metric,
        "max_drop": None if control is None else control.max_drop,
        "validation_samples": None if control is None else len(control.items),
    }


def _measured(tried: _Tried, plain: set[str]) -> None:
    """Fill in an attempt's figures and status from its evaluated result and its model's int8 layers."""
    attempt, result = tried.attempt, tried.result
    if result.status != "ok" or result.built is None or result.drop is None:
        attempt.status, attempt.message = "failed", result.message or "not measured"
        return
    attempt.drop_points = result.drop.points
    if result.speed is not None:
        attempt.latency_median_ms = result.speed.latency.median_ms
        attempt.throughput_fps = result.speed.throughput.throughput_fps
    found = _saved_layers(tried.root / result.built.files[0])
    attempt.layers_fp32 = [layer.label for layer in found if layer.key in plain and not layer.int8]
    if attempt.layers_fp32:
        note = "kept in fp32 (a plain quantization runs them in int8): " + ", ".join(attempt.layers_fp32)
        result.built = replace(result.built, notes=(*result.built.notes, note))
    if not any(layer.int8 for layer in found):
        attempt.status, attempt.message = "failed", "no layer is left in int8"
    else:
        attempt.status = "flagged" if result.flagged else "ok"


def _saved_layers(xml: Path) -> list[Layer]:
    import openvino as ov

    return layers(ov.Core().read_model(str(xml)))


def _pick(tried: list[_Tried]) -> _Tried:
    """The first attempt within the threshold, else the smallest drop (the earliest of equals)."""
    within = next((t for t in tried if t.attempt.status == "ok"), None)
    if within is not None:
        return within
    measured = [t for t in tried if t.attempt.status == "flagged" and t.attempt.drop_points is not None]
    return min(measured, key=lambda t: t.attempt.drop_points or 0.0) if measured else tried[0]


def _adopt(out_dir: Path, kept: _Tried, result: VariantResult, number: int) -> None:
    """The kept attempt's files replace the variant's, and its figures the result's."""
    assert kept.result.built is not None
    for name in kept.result.built.files:
        shutil.copyfile(kept.root / name, out_dir / name)
    note = f"quantized again after the first try was flagged: attempt {number} ({kept.attempt.name}) was kept"
    kept.result.built = replace(kept.result.built, notes=(*kept.result.built.notes, note))
    for field in fields(VariantResult):
        if field.name not in ("variant_id", "attempts", "recovery_note"):
            setattr(result, field.name, getattr(kept.result, field.name))


def _outcome(attempt: Attempt) -> str:
    if attempt.status in ("failed", "skipped"):
        return f"{attempt.status}: {attempt.message}"
    return f"drop {attempt.drop_points:.2f} points, {'within' if attempt.status == 'ok' else 'over'} the threshold"
