"""Holding each built variant to the fp32 reference: the reference's outputs, building one variant, and
measuring it through the runtime (agreement, accuracy, mAP, speed) before the package is written.

The conversion (`converters.pipeline`) builds every variant with these; recovery and the unpruned
baselines build and measure their extra variants with the same functions, so every figure in the report
is taken the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from converters.cache import ConversionCache, samples_digest, source_digest
from converters.calibration import SampleSet
from converters.context import BuildContext, Builder
from converters.detection_metrics import DetectionAccuracy
from converters.errors import ConversionError, VariantSkippedError
from converters.evaluate import (
    describe_reference,
    detection_accuracy,
    load_reference,
    load_variant,
    measure_speed,
    probe_error,
    run_outputs,
    weight_sparsity,
)
from converters.metrics import Accuracy, RunOutputs, accuracy, agreement, drop_of
from converters.progress import Warnings, log, step
from converters.report import ConversionReport, VariantResult
from converters.sources import SourceModel, first_line
from converters.variants import BUILDERS
from edge_runtime.errors import BackendUnavailableError
from edge_runtime.package.loader import ModelPackage
from edge_runtime.package.manifest import SCHEMA_VERSION, DecoderSpec, Manifest, Precision, Task, Variant
from edge_runtime.package.writer import describe_variant
from edge_runtime.placement.model import LoadedModel

if TYPE_CHECKING:
    from converters.pipeline import ConvertOptions

__all__ = [
    "Reference",
    "build_variant",
    "cached_reference",
    "evaluate_variant",
    "load_built",
    "manifest_variants",
    "package_in_memory",
    "run_reference",
    "score_boxes",
    "try_variant",
]


@dataclass(frozen=True)
class Reference:
    """The fp32 reference's figures on the evaluation set, which every variant is held to."""

    outputs: RunOutputs
    labels: np.ndarray | None  # class index per sample, for classifiers with a labelled validation set
    accuracy: Accuracy | None = None
    detection: DetectionAccuracy | None = None


def score_boxes(
    outputs: RunOutputs, eval_set: SampleSet, decoder: DecoderSpec | None, labels: Sequence[str]
) -> DetectionAccuracy | None:
    """mAP@0.5 where the evaluation set has annotated boxes; the manifest's decoder turns outputs into boxes."""
    if eval_set.boxes is None or decoder is None:
        return None
    return detection_accuracy(outputs, eval_set, decoder, labels)


def cached_reference(
    cache: ConversionCache | None, source: SourceModel, eval_set: SampleSet, warnings: Warnings
) -> tuple[RunOutputs, str]:
    """The reference's outputs on the evaluation set: run once per model and data, then from the cache, with the
    warnings running it gave (which runtime stood in for a missing one), which the report must carry each time."""
    if cache is None:
        return run_reference(source, eval_set, warnings)

    def run() -> tuple[RunOutputs, str, list[str]]:
        before = len(warnings.items)
        outputs, label = run_reference(source, eval_set, warnings)
        return outputs, label, warnings.items[before:]

    key = cache.key("reference", source=source_digest(source.path), data=samples_digest(eval_set.samples))
    before = len(warnings.items)
    outputs, label, given = cache.reference(key, run)
    if len(warnings.items) == before:  # from the cache: the warnings were not given this time
        for warning in given:
            warnings.add(warning)
    return outputs, label


def run_reference(source: SourceModel, eval_set: SampleSet, warnings: Warnings) -> tuple[RunOutputs, str]:
    """The source model's outputs on the evaluation set, on its own runtime: what every variant is held to."""
    if source.kind.is_tensorflow:
        from converters.tensorflow_models import run_tensorflow

        step(f"reference {source.path.name} on TensorFlow: running {len(eval_set)} samples")
        return run_tensorflow(source, eval_set.samples)
    reference = load_reference(source, warnings)
    try:
        step(f"reference {describe_reference(source, reference)}: running {len(eval_set)} samples")
        return run_outputs(reference, eval_set.samples), describe_reference(source, reference)
    finally:
        reference.close()


def build_variant(ctx: BuildContext, variant_id: str, builder: Builder | None = None) -> VariantResult:
    """`variant_id` built by its registered builder, or by `builder` (the recovery's other quantizations)."""
    result = VariantResult(variant_id)
    try:
        result.built = (builder or BUILDERS[variant_id])(ctx)
    except VariantSkippedError as skipped:
        result.fail("skipped", skipped.reason)
        step(f"{variant_id}: skipped: {skipped.reason}")
    except Exception as error:
        log.debug("building %s failed", variant_id, exc_info=True)
        result.fail("failed", f"{type(error).__name__}: {first_line(error)}")
        step(f"{variant_id}: failed: {result.message}")
    else:
        files = [ctx.out_dir / f for f in result.built.files]
        result.size_bytes = sum(f.stat().st_size for f in files)
        result.sparsity = weight_sparsity(files[0], result.built.format)
    return result


def manifest_variants(
    out_dir: Path, results: list[VariantResult], report: ConversionReport | None
) -> dict[str, Variant]:
    """Manifest entries of the built variants; after evaluation (`report`), each measured one carries its accuracy,
    the threshold it was judged by, and the CPU that measured it."""
    variants: dict[str, Variant] = {}
    for result in results:
        if result.status != "ok" or result.built is None:
            continue
        built = result.built
        extra: dict[str, Any] = {}
        if report is not None:
            extra["accuracy"] = {**result.manifest_accuracy(), "drop_threshold": report.drop_threshold}
            if result.agreement is not None:
                extra["measured_on"] = report.measured_on
        variants[result.variant_id] = describe_variant(
            out_dir,
            built.files,
            built.format,
            built.precision,
            sparsity=round(result.sparsity or 0.0, 6),
            target=built.target,
            **extra,
        )
    return variants


def package_in_memory(out_dir: Path, results: list[VariantResult], fields: dict[str, Any]) -> ModelPackage | None:
    """The package as it will be written, to load the variants through the runtime before the manifest exists."""
    variants = manifest_variants(out_dir, results, report=None)
    if not variants:
        return None
    manifest = Manifest(schema_version=SCHEMA_VERSION, variants=variants, **fields)
    return ModelPackage(root=out_dir, manifest=manifest)


def load_built(out_dir: Path, result: VariantResult, fields: dict[str, Any]) -> LoadedModel:
    """A built variant of the folder `out_dir` loaded through the runtime, as `evaluate_variant` loads it."""
    package = package_in_memory(out_dir, [result], fields)
    if package is None:
        raise ConversionError(f"{result.variant_id} was not built")
    return load_variant(package, result.variant_id)


def evaluate_variant(
    package: ModelPackage, result: VariantResult, reference: Reference, eval_set: SampleSet, options: ConvertOptions
) -> None:
    """Agreement, accuracy, mAP and speed of one variant; a variant that does not load or run is failed."""
    try:
        model = load_variant(package, result.variant_id)
    except BackendUnavailableError as error:
        if package.variant(result.variant_id).target is None:
            result.fail("failed", f"does not load in the runtime: {first_line(error)}")
        else:  # compiled for hardware this workstation lacks: packaged, but not measured here
            result.message = f"not measured on this machine: {first_line(error)}"
        return
    except Exception as error:
        result.fail("failed", f"does not load in the runtime: {first_line(error)}")
        return
    try:
        step(f"{result.variant_id}: running {len(eval_set)} samples on {model.label}")
        outputs = run_outputs(model, eval_set.samples)
        classification = package.manifest.task is Task.CLASSIFICATION
        result.agreement = agreement(reference.outputs, outputs, classification=classification)
        result.accuracy = accuracy(outputs, reference.labels) if reference.labels is not None else None
        result.detection = score_boxes(outputs, eval_set, package.manifest.decoder, package.manifest.labels)
        result.drop = drop_of(
            reference.accuracy, result.accuracy, result.agreement, reference.detection, result.detection
        )
        result.flagged = result.drop.points > options.drop_threshold
        if package.variant(result.variant_id).precision is Precision.INT8:
            result.probe_error = probe_error(package, model)
        if options.bench_seconds > 0:
            result.speed = measure_speed(model, options.bench_seconds, options.settings.seed)
    except Exception as error:
        log.debug("evaluating %s failed", result.variant_id, exc_info=True)
        result.fail("failed", f"does not run in the runtime: {type(error).__name__}: {first_line(error)}")
    finally:
        model.close()


def try_variant(
    ctx: BuildContext,
    variant_id: str,
    builder: Builder,
    *,
    fields: dict[str, Any],
    reference: Reference,
    eval_set: SampleSet,
    options: ConvertOptions,
) -> VariantResult:
    """A variant built by `builder` into `ctx.out_dir` and evaluated there as every variant is."""
    result = build_variant(ctx, variant_id, builder)
    package = package_in_memory(ctx.out_dir, [result], fields)
    if result.status == "ok" and package is not None:
        evaluate_variant(package, result, reference, eval_set, options)
    return result
