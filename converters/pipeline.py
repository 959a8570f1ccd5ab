"""The conversion from start to end: read the model and data, build the variants, measure, package, report.

Bad input (model, data, flags) stops the conversion before anything is built. After that, a variant
that fails to build or to run does not stop the others: its error goes into the report, and the
package holds only the variants that loaded and ran through the runtime.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from converters.annotations import check_detection_decoder, detection_task, load_annotated_images
from converters.cache import BuildCache, ConversionCache, source_digest
from converters.calibration import SampleSet, load_calibration, load_validation, synthetic_samples
from converters.context import BuildContext, QuantizationSettings
from converters.describe import InputFlags, build_input_specs, model_tensors
from converters.errors import ConversionError
from converters.evaluate import (
    this_machine,
)
from converters.metrics import accuracy
from converters.progress import (
    Schedule,
    Warnings,
    end_schedule,
    log,
    plan_stages,
    skip_stage,
    stage,
    start_schedule,
    step,
)
from converters.prune_channels import (
    ChannelPruneOptions,
    check_channel_prunable,
    check_channel_prune_options,
    check_has_data,
    prune_channels_source,
)
from converters.pruned_baselines import compare_unpruned
from converters.pruning import PruneOptions, check_prunable, check_prune_options, prune_source
from converters.pytorch_source import open_model
from converters.recovery import needs_recovery, recover_int8
from converters.report import REPORT_FILES, ConversionReport, VariantResult, write_report
from converters.requirements import check_requirements, needed
from converters.sources import SourceModel, first_line
from converters.ultralytics_exports import model_hints
from converters.variant_evaluation import (
    Reference,
    build_variant,
    cached_reference,
    evaluate_variant,
    load_built,
    manifest_variants,
    package_in_memory,
    score_boxes,
    try_variant,
)
from converters.variants import BUILDERS, check_variant_ids, default_variants, quick_variants
from edge_runtime.package.loader import open_package
from edge_runtime.package.maker import parse_decoder, parse_labels, parse_task
from edge_runtime.package.manifest import (
    DEFAULT_DROP_THRESHOLD,
    MANIFEST_NAME,
    InputSpec,
    ModelFormat,
    Precision,
    Task,
)
from edge_runtime.package.writer import write_package

SYNTHETIC_SAMPLES = 16


@dataclass(frozen=True)
class ConvertOptions:
    model: Path
    out_dir: Path
    name: str | None = None
    task: str | None = None
    labels: str | None = None
    input_spec: Path | None = None
    input_flags: InputFlags = field(default_factory=InputFlags)
    calibration: Path | None = None
    validation: Path | None = None
    annotations: Path | None = None  # COCO boxes for the images in `validation` (detection models)
    settings: QuantizationSettings = field(default_factory=QuantizationSettings)
    variants: tuple[str, ...] | None = None  # None: every variant the source's format can be turned into
    drop_threshold: float = DEFAULT_DROP_THRESHOLD
    bench_seconds: float = 2.0
    decoder: str | None = None
    decoder_params: str | None = None
    overwrite: bool = False
    prune: PruneOptions | None = None
    prune_channels: ChannelPruneOptions | None = None  # structured pruning of PyTorch and ONNX sources
    input_shape: tuple[int, ...] | None = None  # for PyTorch `module:factory` sources
    recover: bool = True  # quantize a flagged openvino/int8 again in better ways (converters.recovery)
    quick: bool = False  # a first look: only each format's fp32 and int8 (the CLI also turns recovery off)
    cache_dir: Path | None = None  # keep reference outputs and int8 quantizations for the next conversion


@dataclass(frozen=True)
class Inputs:
    """Everything read and checked before the first variant is built."""

    source: SourceModel
    source_label: str
    specs: tuple[InputSpec, ...]
    manifest_fields: dict[str, Any]
    calibration: SampleSet | None
    validation: SampleSet | None
    task: Task
    settings_seed: int


def convert(options: ConvertOptions) -> ConversionReport:
    """Convert, measure and package; returns the report (also written to the output folder)."""
    start_schedule(Schedule(bench_seconds=options.bench_seconds))
    try:
        with tempfile.TemporaryDirectory(prefix="edge-convert-") as scratch:
            return _convert(options, Path(scratch))
    finally:
        end_schedule()


def _convert(options: ConvertOptions, scratch: Path) -> ConversionReport:
    """The conversion, with a scratch folder for derived models (exports, the pruned model) that is not shipped."""
    warnings = Warnings()
    if options.variants is not None:
        check_variant_ids(options.variants)
    if options.prune is not None:
        check_prune_options(options.prune)
    if options.prune_channels is not None:
        check_channel_prune_options(options.prune_channels)
    check_requirements(needed(options.model, options.variants))
    stage("load")
    inputs = read_inputs(options, warnings, scratch)
    if options.prune is not None:
        check_prunable(inputs.source)
    if options.prune_channels is not None:
        check_channel_prunable(options.model, inputs.source)
        check_has_data(inputs.calibration, inputs.validation, options.prune_channels)
    variant_ids = check_variant_ids(options.variants or default_variants(inputs.source.kind))
    if options.quick:
        variant_ids = quick_variants(variant_ids) or variant_ids
    prepare_out_dir(options.out_dir, options.overwrite, inputs.source.path)
    eval_set = evaluation_set(inputs, warnings)
    budget = options.settings.recovery_seconds if options.recover else 0.0
    plan_stages(variant_ids, len(inputs.calibration) if inputs.calibration else 0, len(eval_set), budget)
    stage("reference")
    labels = eval_set.labels if inputs.task is Task.CLASSIFICATION else None
    cache = ConversionCache(options.cache_dir) if options.cache_dir is not None else None
    reference_outputs, reference_label = cached_reference(cache, inputs.source, eval_set, warnings)
    reference = Reference(
        reference_outputs,
        labels,
        accuracy(reference_outputs, labels) if labels is not None else None,
        score_boxes(reference_outputs, eval_set, inputs.manifest_fields["decoder"], inputs.manifest_fields["labels"]),
    )
    built_from, pruning, channel_pruning = inputs.source, None, None
    if options.prune is not None:
        built_from, pruning = prune_source(inputs.source, options.prune, scratch)
    if options.prune_channels is not None:
        stage("prune channels")
        built_from, channel_pruning = prune_channels_source(
            options.model,
            inputs.source,
            options.prune_channels,
            inputs.specs[0].shape,
            inputs.calibration or eval_set,
            eval_set,
            inputs.task is Task.CLASSIFICATION,
            scratch,
        )
    builds = BuildCache(cache, source_digest(built_from.path)) if cache is not None else None
    ctx = BuildContext(
        built_from, options.out_dir, inputs.calibration, inputs.validation, inputs.task, options.settings, builds
    )
    results = []
    for variant_id in variant_ids:
        stage(f"{variant_id}: build")
        results.append(build_variant(ctx, variant_id))
        if results[-1].status != "ok":
            skip_stage(f"{variant_id}: evaluate")
    report = ConversionReport(
        name=str(inputs.manifest_fields["name"]),
        source=inputs.source_label,
        reference=reference_label,
        evaluated_on=eval_set.origin,
        calibration=inputs.calibration.origin if inputs.calibration else "none",
        settings=options.settings,
        measured_on=this_machine(),
        drop_threshold=options.drop_threshold,
        bench_seconds=options.bench_seconds,
        reference_accuracy=reference.accuracy,
        reference_detection=reference.detection,
        warnings=warnings.items,
        variants=results,
        pruning=pruning,
        channel_pruning=channel_pruning,
    )
    package = package_in_memory(options.out_dir, results, inputs.manifest_fields)
    for result in results:
        if result.status == "ok" and package is not None:
            stage(f"{result.variant_id}: evaluate")
            evaluate_variant(package, result, reference, eval_set, options)
            if options.recover and needs_recovery(result):
                fields = inputs.manifest_fields
                attempt = partial(try_variant, fields=fields, reference=reference, eval_set=eval_set, options=options)
                try:
                    recover_int8(
                        ctx, result, reference, eval_set, options.drop_threshold, attempt, scratch / "recovery"
                    )
                except Exception as error:  # the variant stays as it was, flagged; the report says why
                    log.debug("recovering %s failed", result.variant_id, exc_info=True)
                    warnings.add(f"{result.variant_id}: recovery stopped: {type(error).__name__}: {first_line(error)}")
    if channel_pruning is not None:
        stage("unpruned baselines")
        attempt = partial(
            try_variant, fields=inputs.manifest_fields, reference=reference, eval_set=eval_set, options=options
        )
        load = partial(load_built, fields=inputs.manifest_fields)
        compare_unpruned(ctx, inputs.source, report, attempt, load, scratch / "unpruned", options.settings.seed)
    stage("report")
    report.package_written = _write_manifest(options.out_dir, results, inputs.manifest_fields, report)
    write_report(report, options.out_dir)
    return report


def evaluation_set(inputs: Inputs, warnings: Warnings) -> SampleSet:
    """Validation data where given (it is labelled), else the calibration data, else synthetic inputs."""
    if inputs.validation is not None:
        return inputs.validation
    if inputs.calibration is not None:
        return inputs.calibration
    warnings.add("no calibration or validation data: agreement was measured on synthetic inputs")
    return synthetic_samples(inputs.specs, SYNTHETIC_SAMPLES, inputs.settings_seed)


def read_inputs(options: ConvertOptions, warnings: Warnings, scratch: Path) -> Inputs:
    source, source_label = open_model(options.model, options.input_shape, scratch)
    tensors, outputs = model_tensors(source)
    hints = model_hints(source, tensors, outputs, warnings)
    specs = build_input_specs(tensors, options.input_spec, options.input_flags, hints.input_fields)
    names = [t.name for t in tensors]
    labels = parse_labels(options.labels) or hints.labels
    task_name = hints.task_name(options.task)
    decoder_name, decoder_params = hints.decoder_choice(options.task, options.decoder, options.decoder_params)
    validation = None
    if options.annotations is not None:
        task = detection_task(task_name)
        decoder = parse_decoder(decoder_name, decoder_params, labels)
        check_detection_decoder(decoder, labels)
        step(f"reading annotations {options.annotations}")
        validation = load_annotated_images(options.annotations, options.validation, specs, labels, warnings)
    else:
        if options.validation is not None:
            step(f"reading validation data {options.validation}")
            validation = load_validation(options.validation, specs, names, labels)
            labels = labels or validation.class_names
        labelled = bool(labels) or (validation is not None and validation.labels is not None)
        task = parse_task(task_name, labelled=labelled)
        decoder = parse_decoder(decoder_name, decoder_params, labels)
    calibration = None
    if options.calibration is not None:
        step(f"reading calibration data {options.calibration}")
        settings = options.settings
        calibration = load_calibration(options.calibration, specs, names, settings.subset_size, settings.seed, warnings)
    if any(p is not None and p.is_dir() for p in (options.calibration, options.validation)):
        spec = specs[0]
        if spec.color_order is None and spec.mean is None and spec.std is None:
            warnings.add(
                "images are fed as OpenCV reads them (BGR, 0-255): no --color-order, --mean or --std was given"
            )
    fields: dict[str, Any] = {
        "name": options.name or _default_name(source.path),
        "task": task,
        "description": f"Converted from {source.path.name} by edge-convert",
        "inputs": specs,
        "output_names": tuple(t.name for t in outputs),
        "labels": labels,
        "decoder": decoder,
    }
    return Inputs(source, source_label, specs, fields, calibration, validation, task, options.settings.seed)


def _default_name(path: Path) -> str:
    """The file's name, or for packaged files (`face/tflite/fp32/model.tflite`) the package folder's name."""
    if path.stem != "model":
        return path.stem
    layout_folders = {
        *(f.value for f in ModelFormat),
        *(p.value for p in Precision),
        *(vid.split("/")[1] for vid in BUILDERS),
    }
    folder = next((p.name for p in path.resolve().parents if p.name not in layout_folders), "")
    return folder or path.stem


def prepare_out_dir(out_dir: Path, overwrite: bool, source: Path) -> None:
    """Refuse to mix with an existing folder's files, unless asked; then remove only what the converter writes."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConversionError(f"output {out_dir} exists and is not a folder")
    for variant_id in BUILDERS:
        if source.resolve().is_relative_to((out_dir / variant_id).resolve()):
            raise ConversionError(f"the model {source} lies in {out_dir / variant_id}, which the conversion rewrites")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        if not overwrite:
            raise ConversionError(f"output folder {out_dir} is not empty; choose another or pass --overwrite")
        for variant_id in BUILDERS:
            shutil.rmtree(out_dir / variant_id, ignore_errors=True)
        for name in (MANIFEST_NAME, *REPORT_FILES):
            (out_dir / name).unlink(missing_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)


def _write_manifest(
    out_dir: Path, results: list[VariantResult], fields: dict[str, Any], report: ConversionReport
) -> bool:
    variants = manifest_variants(out_dir, results, report)
    if not variants:
        return False
    write_package(out_dir, variants, **fields)
    open_package(out_dir)  # reads back what was written: the manifest parses and names existing files
    return True
