"""OpenVINO IR variants: fp32, fp16-compressed weights, and int8 by NNCF post-training quantization.

With a labelled validation set the int8 variant is quantized with accuracy control: NNCF reverts the
layers that cost the most top-1 back to float until the drop is within `max_drop`, instead of
shipping whatever the calibration happened to produce. Weights keep to 7 bits in every layer (NNCF's
overflow fix, which NNCF applies to the first layer only by default) so that CPUs with and without VNNI
compute the same integers: see `QuantizationSettings`. A flagged int8 variant is quantized again with
other settings by `converters.recovery`, through `quantize_int8`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from converters.budget import BudgetedValidation, RecoveryBudget, counting_reverts
from converters.cache import BuildCache, samples_digest
from converters.calibration import Sample, SampleSet
from converters.context import BuildContext, BuiltVariant, QuantizationSettings, model_input, top1_hits
from converters.errors import VariantSkippedError
from converters.progress import step
from edge_runtime.package.manifest import ModelFormat, Precision


def build_fp32(ctx: BuildContext) -> BuiltVariant:
    step("openvino/fp32: converting")
    return _save(ctx, ctx.source.openvino_model(), "openvino/fp32", Precision.FP32, compress=False)


def build_fp16(ctx: BuildContext) -> BuiltVariant:
    step("openvino/fp16: converting with fp16 weights")
    built = _save(ctx, ctx.source.openvino_model(), "openvino/fp16", Precision.FP16, compress=True)
    note = "fp16 weights; the CPU plugin computes them in fp32, GPU and NPU in fp16"
    return BuiltVariant(built.format, built.precision, built.files, (note,))


@dataclass(frozen=True)
class AccuracyControl:
    """How `nncf.quantize_with_accuracy_control` judges a quantized model, and how far it may let it fall.

    NNCF reverts the layers that cost the most back to float until `validate`'s metric is within
    `max_drop` (in the metric's own units) of the float model's. Each item is a (sample, target) pair;
    `validate` returns the metric and one value per item, which NNCF needs to rank the layers.
    """

    items: list[tuple[Sample, Any]]
    validate: Callable[[Any, Iterable[tuple[Sample, Any]]], tuple[float, list[float]]]
    max_drop: float
    metric: str
    note: str


def top1_control(validation: SampleSet, labels: np.ndarray, max_drop: float) -> AccuracyControl:
    """Top-1 accuracy (a fraction) on a labelled validation set: `max_drop` 0.01 is one point."""
    items = list(zip(validation.samples, labels.tolist(), strict=True))
    note = f"accuracy control: max top-1 drop {max_drop:.2%} on {len(items)} validation samples"
    return AccuracyControl(items, _validate_top1, max_drop, "top-1 accuracy, as a fraction", note)


def build_int8(ctx: BuildContext) -> BuiltVariant:
    """int8 as configured: with accuracy control on top-1 where a labelled validation set exists."""
    control = None
    if ctx.accuracy_control and ctx.validation is not None and ctx.validation.labels is not None:
        control = top1_control(ctx.validation, ctx.validation.labels, ctx.settings.max_drop)
    return quantize_int8(ctx, control)


def quantize_int8(
    ctx: BuildContext, control: AccuracyControl | None, budget: RecoveryBudget | None = None
) -> BuiltVariant:
    """NNCF quantization with `ctx`'s settings and calibration, into `ctx`'s output folder.

    Called by `build_int8`, and by `converters.recovery` with other settings, another folder, its own
    accuracy control and the recovery's `budget`; accuracy control without one gets the settings' own.
    The same quantization of the same model and data comes from `ctx.cache` where it holds one.
    """
    if ctx.calibration is None:
        raise VariantSkippedError("int8 needs calibration data: give --calibration")
    budget = budget or RecoveryBudget(ctx.settings.recovery_seconds, ctx.settings.recovery_iterations)
    if ctx.cache is None:
        return _quantize(ctx, control, budget)
    # An accuracy control the clock stopped went as far as this machine got in the time: kept apart, under the
    # budget too, so that only the same conversion with the same budget reuses it.
    key = _cache_key(ctx.cache, ctx, control, budget.max_iterations)
    stopped_key = f"{key}-stopped-{ctx.settings.recovery_seconds:g}s"
    for found in (key, stopped_key) if control is not None else (key,):
        cached = ctx.cache.restore(found, ctx.out_dir)
        if cached is not None:
            step("openvino/int8: the same quantization from the cache")
            budget.start_control()
            budget.stopped_control = found == stopped_key
            if not cached[0]:  # the time ran out before a model was made: the reason is the note
                raise VariantSkippedError(cached[1][0])
            return BuiltVariant(ModelFormat.OPENVINO, Precision.INT8, *cached)
    try:
        built = _quantize(ctx, control, budget)
    except VariantSkippedError as abandoned:
        if budget.stopped_control:
            ctx.cache.store.keep_files(stopped_key, ctx.out_dir, [], [abandoned.reason])
        raise
    ctx.cache.store.keep_files(stopped_key if budget.stopped_control else key, ctx.out_dir, built.files, built.notes)
    return built


def _cache_key(cache: BuildCache, ctx: BuildContext, control: AccuracyControl | None, iterations: int) -> str:
    """What a quantization is a function of: the model, the calibration samples, the settings, and the control's
    metric, limit, iteration cap and validation items (samples and targets)."""
    assert ctx.calibration is not None
    more: dict[str, Any] = {}
    if control is not None:
        targets = [repr(target) for _, target in control.items]
        validation = samples_digest([sample for sample, _ in control.items], targets)
        more = {"control": control.metric, "max_drop": control.max_drop, "cap": iterations, "validation": validation}
    return cache.key("openvino/int8", ctx.settings, cache.data(ctx.calibration.samples), **more)


def _quantize(ctx: BuildContext, control: AccuracyControl | None, budget: RecoveryBudget) -> BuiltVariant:
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters

    assert ctx.calibration is not None
    settings = ctx.settings
    calibration = nncf.Dataset(ctx.calibration.samples, model_input)
    common = quantization_options(settings, len(ctx.calibration))
    notes = [
        f"NNCF {nncf.__version__} post-training quantization: preset {settings.preset}, "
        f"{common['subset_size']} calibration samples, fast bias correction {settings.fast_bias_correction}",
        settings.weight_range_note(),
    ]
    if settings.ignored_scope:
        notes.append("kept in float: nodes matching " + ", ".join(settings.ignored_scope))
    model = float32_weights(ctx.source.openvino_model())
    if control is not None:
        step(f"openvino/int8: quantizing with accuracy control ({control.metric}, max drop {control.max_drop:g})")
        validate = BudgetedValidation(control.validate, len(control.items), budget)
        validation = nncf.Dataset(control.items, lambda item: model_input(item[0]))
        with counting_reverts(budget):
            quantized = nncf.quantize_with_accuracy_control(
                model,
                calibration,
                validation,
                validate,
                max_drop=control.max_drop,
                drop_type=nncf.DropType.ABSOLUTE,
                advanced_quantization_parameters=advanced_parameters(settings),
                advanced_accuracy_restorer_parameters=AdvancedAccuracyRestorerParameters(
                    max_num_iterations=budget.max_iterations
                ),
                **common,
            )
        notes.append(control.note)
        if budget.stopped_control:
            notes.append(
                f"accuracy control stopped when its time ran out ({budget.describe()}) at revert "
                f"{budget.control_reverts}; the model is as it stood then"
            )
    else:
        step(f"openvino/int8: quantizing with NNCF ({common['subset_size']} calibration samples)")
        quantized = nncf.quantize(model, calibration, advanced_parameters=advanced_parameters(settings), **common)
    built = _save(ctx, quantized, "openvino/int8", Precision.INT8, compress=False)
    return BuiltVariant(built.format, built.precision, built.files, tuple(notes))


def quantization_options(settings: QuantizationSettings, samples: int) -> dict[str, Any]:
    """The arguments `nncf.quantize` and `nncf.quantize_with_accuracy_control` share, from the settings."""
    import nncf

    return {
        "preset": nncf.QuantizationPreset(settings.preset),
        "subset_size": min(settings.subset_size, samples),
        "fast_bias_correction": settings.fast_bias_correction,
        "ignored_scope": nncf.IgnoredScope(patterns=list(settings.ignored_scope)) if settings.ignored_scope else None,
    }


def advanced_parameters(settings: QuantizationSettings) -> Any:
    """NNCF's overflow fix on every layer, or off when full-range weights are asked for."""
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

    fix = OverflowFix.DISABLE if settings.full_range_weights else OverflowFix.ENABLE
    return AdvancedQuantizationParameters(overflow_fix=fix)


def float32_weights(model: Any) -> Any:
    """Fold fp16 weights stored with a Convert to f32 (as TFLite models arrive) into plain f32 constants.

    NNCF puts its weight quantizers after such a Convert, where saving cannot fold them into int8
    constants: the int8 model would keep its fp16 weights and come out larger than the fp32 one.
    """
    import openvino as ov

    for op in model.get_ordered_ops():
        if op.get_type_name() != "Convert" or op.get_output_element_type(0) != ov.Type.f32:
            continue
        weights = op.input_value(0).get_node()
        if weights.get_type_name() == "Constant" and weights.get_element_type() == ov.Type.f16:
            op.output(0).replace(ov.op.Constant(np.asarray(weights.get_data(), dtype=np.float32)).output(0))
    model.validate_nodes_and_infer_types()
    return model


def _validate_top1(compiled: Any, items: Iterable[tuple[Sample, Any]]) -> tuple[float, list[float]]:
    """NNCF's validation function: top-1 of a compiled model, with each item's hit so NNCF can rank layers."""
    scores, labels = [], []
    output = compiled.outputs[0]
    for inputs, label in items:
        scores.append(compiled(model_input(inputs))[output])
        labels.append(label)
    hits = top1_hits(scores, labels)
    return (sum(hits) / len(hits) if hits else 0.0), hits


def _save(ctx: BuildContext, model: Any, variant_id: str, precision: Precision, compress: bool) -> BuiltVariant:
    import openvino as ov

    xml = ctx.variant_dir(variant_id) / "model.xml"
    ov.save_model(model, str(xml), compress_to_fp16=compress)
    return BuiltVariant(ModelFormat.OPENVINO, precision, (ctx.relative(xml), ctx.relative(xml.with_suffix(".bin"))))
