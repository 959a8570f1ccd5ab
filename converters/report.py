"""The conversion report: one row per variant, written as report.md, report.json and report.png.

The report is where a person decides what to ship, so every variant the user asked for has a row,
including the ones that failed or were skipped (with why), and a variant that lost more than the
threshold is flagged "do not ship" rather than left for the reader to spot.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from converters.context import BuiltVariant, QuantizationSettings
from converters.detection_metrics import DetectionAccuracy
from converters.evaluate import Speed
from converters.metrics import Accuracy, Agreement, Drop
from converters.pruning import PruningSummary
from converters.pruning_report import channel_pruning_dict, channel_pruning_section, plot_unpruned

if TYPE_CHECKING:
    from converters.prune_channels import ChannelPruningSummary
    from converters.pruned_baselines import Speedup
from edge_runtime.package.manifest import MeasuredOn

REPORT_FILES = ("report.md", "report.json", "report.png")


@dataclass
class Attempt:
    """One quantization tried on a flagged variant by `converters.recovery`, with its figures as evaluated."""

    name: str
    settings: dict[str, str | int | float | bool | None]
    status: str  # ok (within the threshold), flagged, failed or skipped
    message: str = ""
    drop_points: float | None = None
    latency_median_ms: float | None = None
    throughput_fps: float | None = None
    layers_fp32: list[str] = field(default_factory=list)  # int8 in a plain quantization, float in this attempt
    kept: bool = False


@dataclass
class VariantResult:
    variant_id: str
    status: str = "ok"  # ok, failed or skipped
    message: str = ""
    built: BuiltVariant | None = None
    size_bytes: int | None = None
    sparsity: float | None = None
    agreement: Agreement | None = None
    accuracy: Accuracy | None = None
    detection: DetectionAccuracy | None = None  # mAP@0.5 against annotated boxes
    drop: Drop | None = None
    speed: Speed | None = None
    probe_error: float | None = None  # int8 only: mean output error against fp32 on the fidelity probe's inputs
    flagged: bool = False
    attempts: list[Attempt] = field(default_factory=list)  # the first try and the recovery's, when it was flagged
    recovery_note: str = ""  # how far recovery got within its budget

    def fail(self, status: str, message: str) -> None:
        self.status, self.message = status, message

    def manifest_accuracy(self) -> dict[str, float]:
        """What the package's manifest records about this variant's accuracy."""
        values: dict[str, float] = {}
        if self.accuracy is not None:
            values["top1"] = round(self.accuracy.top1, 6)
            if self.accuracy.top5 is not None:
                values["top5"] = round(self.accuracy.top5, 6)
        if self.detection is not None:
            values["map50"] = round(self.detection.map50, 6)
        if self.agreement is not None:
            values["cosine_vs_fp32"] = round(self.agreement.cosine, 6)
            if self.agreement.top1_agreement is not None:
                values["top1_agreement_vs_fp32"] = round(self.agreement.top1_agreement, 6)
        if self.drop is not None:
            values["drop_points"] = round(self.drop.points, 4)
        if self.probe_error is not None:
            values["probe_error"] = round(self.probe_error, 6)
        return values


@dataclass
class ConversionReport:
    name: str
    source: str
    reference: str
    evaluated_on: str
    calibration: str
    settings: QuantizationSettings
    measured_on: MeasuredOn
    drop_threshold: float
    bench_seconds: float
    reference_accuracy: Accuracy | None = None
    reference_detection: DetectionAccuracy | None = None
    warnings: list[str] = field(default_factory=list)
    variants: list[VariantResult] = field(default_factory=list)
    package_written: bool = False
    pruning: PruningSummary | None = None
    channel_pruning: ChannelPruningSummary | None = None
    unpruned: list[VariantResult] = field(default_factory=list)  # built beside pruned variants, not packaged
    speedups: list[Speedup] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("unpruned")
        data.pop("speedups")
        if self.channel_pruning is not None:
            data["channel_pruning"] = channel_pruning_dict(self)
        data["measured_on"] = self.measured_on.model_dump(mode="json")
        if self.pruning is not None:
            data["pruning"]["overall_sparsity"] = self.pruning.overall
            for row, layer in zip(data["pruning"]["layers"], self.pruning.layers, strict=True):
                row["sparsity"] = layer.sparsity
        for row, result in zip(data["variants"], self.variants, strict=True):
            row["notes"] = list(result.built.notes) if result.built else []
            row.pop("built")
            row["files"] = list(result.built.files) if result.built else []
            if result.agreement is not None:
                row["agreement"].update(
                    max_abs_error=result.agreement.max_abs_error,
                    mean_abs_error=result.agreement.mean_abs_error,
                    cosine=result.agreement.cosine,
                )
        return data


def write_report(report: ConversionReport, out_dir: Path) -> None:
    (out_dir / "report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    (out_dir / "report.md").write_text(markdown(report), encoding="utf-8")
    plot(report, out_dir / "report.png")


def verdict(result: VariantResult, threshold: float) -> str:
    if result.status != "ok":
        return f"{result.status}: {result.message}"
    if result.flagged and result.drop is not None:
        return f"FLAG: do not ship (drop {result.drop.points:.2f} > {threshold:g} points)"
    return f"ok; {result.message}" if result.message else "ok"


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _size(size: int | None) -> str:
    return "–" if size is None else f"{size / 1024:.1f} KiB" if size < 1 << 20 else f"{size / (1 << 20):.2f} MiB"


def _row(result: VariantResult, threshold: float, detection: bool) -> str:
    agreed, acc, speed = result.agreement, result.accuracy, result.speed
    boxes = [_num(None if result.detection is None else 100 * result.detection.map50, ".2f")] if detection else []
    cells = [
        f"`{result.variant_id}`",
        _size(result.size_bytes),
        _num(None if result.sparsity is None else 100 * result.sparsity, ".1f"),
        _num(None if acc is None else 100 * acc.top1, ".2f"),
        _num(None if acc is None or acc.top5 is None else 100 * acc.top5, ".2f"),
        *boxes,
        _num(None if result.drop is None else result.drop.points, ".2f"),
        _num(None if agreed is None else agreed.cosine, ".5f"),
        _num(None if agreed is None else agreed.max_abs_error, ".3g"),
        _num(None if agreed is None else agreed.mean_abs_error, ".3g"),
        _num(None if speed is None else speed.latency.median_ms, ".3f"),
        _num(None if speed is None else speed.latency.p90_ms, ".3f"),
        _num(None if speed is None else speed.throughput.throughput_fps, ".1f"),
        verdict(result, threshold).replace("|", "\\|"),
    ]
    return "| " + " | ".join(cells) + " |"


def markdown(report: ConversionReport) -> str:
    s = report.settings
    lines = [
        f"# Conversion report: {report.name}",
        "",
        f"- Source: {report.source}",
        f"- Reference (fp32): {report.reference}",
        f"- Evaluated on: {report.evaluated_on}",
        f"- Calibration: {report.calibration}",
        f"- Quantization: preset {s.preset}, subset size {s.subset_size}, fast bias correction "
        f"{s.fast_bias_correction}, ignored scope {', '.join(s.ignored_scope) or 'none'}, max drop "
        f"{s.max_drop:g} (with a labelled validation set), seed {s.seed}; OpenVINO and ONNX int8: "
        f"{s.weight_range_note()}",
        f"- Flag threshold: drop over {report.drop_threshold:g} points; speed measured for {report.bench_seconds:g} s "
        "per figure on this machine's CPU",
        f"- Measured on: {report.measured_on.cpu} (int8 features: {' '.join(report.measured_on.int8_features)}); "
        "a box whose int8 features differ checks each int8 variant against fp32 before it trusts these figures",
    ]
    if report.reference_accuracy is not None:
        ref = report.reference_accuracy
        top5 = f", top-5 {100 * ref.top5:.2f}%" if ref.top5 is not None else ""
        lines.append(f"- Reference accuracy: top-1 {100 * ref.top1:.2f}%{top5}")
    if report.reference_detection is not None:
        ref_boxes = report.reference_detection
        lines.append(
            f"- Reference mAP@0.5: {100 * ref_boxes.map50:.2f}% on {ref_boxes.images} images with "
            f"{ref_boxes.objects} annotated boxes, scoring the boxes the decoder publishes (its min_score applies)"
        )
    detection = report.reference_detection is not None or any(r.detection is not None for r in report.variants)
    columns = ["Variant", "Size", "Sparsity %", "Top-1 %", "Top-5 %", *(["mAP@0.5 %"] if detection else [])]
    columns += ["Drop (points)", "Cosine", "Max abs err", "Mean abs err", "Latency median (ms)", "Latency p90 (ms)"]
    columns += ["Throughput (fps)", "Verdict"]
    lines += ["", "## Variants", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += [_row(result, report.drop_threshold, detection) for result in report.variants]
    drops = {r.drop.metric for r in report.variants if r.drop is not None}
    lines += ["", "Drop: " + "; ".join(sorted(drops)) if drops else "Drop: not measured", ""]
    notes = [f"- `{r.variant_id}`: {note}" for r in report.variants if r.built for note in r.built.notes]
    notes += [
        f"- `{r.variant_id}`: mean output error against fp32 on the fidelity probe's inputs {100 * r.probe_error:.3g}% "
        "of the output range, the figure a box with other int8 features measures again"
        for r in report.variants
        if r.probe_error is not None
    ]
    if notes:
        lines += ["## Notes", "", *notes, ""]
    if detection:
        lines += per_class_section(report)
    lines += recovery_section(report)
    if report.pruning is not None:
        lines += pruning_section(report.pruning)
    if report.channel_pruning is not None:
        lines += channel_pruning_section(report)
    if report.warnings:
        lines += ["## Warnings", "", *(f"- {w}" for w in report.warnings), ""]
    if not report.package_written:
        lines += ["**No variant was built: no package was written.**", ""]
    return "\n".join(lines)


def per_class_section(report: ConversionReport) -> list[str]:
    """AP@0.5 of each annotated class, reference and variants side by side; only worth a table for several classes."""
    scored = [("reference", report.reference_detection)] + [(f"`{r.variant_id}`", r.detection) for r in report.variants]
    classes = sorted({label for _, d in scored if d is not None for label in d.per_class})
    if len(classes) < 2:
        return []
    lines = [
        "## AP@0.5 per class (%)",
        "",
        "| Model | " + " | ".join(classes) + " |",
        "|" + "---|" * (len(classes) + 1),
    ]
    for name, found in scored:
        if found is not None:
            lines.append(
                f"| {name} | " + " | ".join(_num(_percent(found.per_class.get(c)), ".2f") for c in classes) + " |"
            )
    return [*lines, ""]


def _percent(value: float | None) -> float | None:
    return None if value is None else 100 * value


def recovery_section(report: ConversionReport) -> list[str]:
    """Every quantization tried on each flagged variant, which one the package holds, and why."""
    lines: list[str] = []
    for result in report.variants:
        if result.attempts:
            lines += _recovery_table(result, report.drop_threshold)
    return ["## Recovery", "", *lines] if lines else []


def _recovery_table(result: VariantResult, threshold: float) -> list[str]:
    attempts = result.attempts
    kept = next((i for i, a in enumerate(attempts) if a.kept), None)
    if kept is None:
        why = "none was kept"
    elif attempts[kept].status == "ok":
        why = f"kept attempt {kept + 1} ({attempts[kept].name}), the first within the threshold"
    else:
        why = (
            f"no attempt came within the threshold: kept attempt {kept + 1} ({attempts[kept].name}), the smallest "
            "drop, and the variant stays flagged"
        )
    lines = [
        f"`{result.variant_id}` was flagged (drop over {threshold:g} points) and quantized again, in order of cost; "
        f"{why}.",
        *([result.recovery_note] if result.recovery_note else []),
        "",
        "| # | Attempt | Preset | Fast bias correction | Accuracy control | Drop (points) | Latency median (ms) "
        "| Throughput (fps) | Layers kept in fp32 | Status |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for number, attempt in enumerate(attempts, 1):
        status = (
            attempt.status + (f": {attempt.message}" if attempt.message else "") + (" (kept)" if attempt.kept else "")
        )
        cells = [
            str(number),
            attempt.name,
            str(attempt.settings.get("preset", "–")),
            str(attempt.settings.get("fast_bias_correction", "–")),
            _control_cell(attempt.settings),
            _num(attempt.drop_points, ".2f"),
            _num(attempt.latency_median_ms, ".3f"),
            _num(attempt.throughput_fps, ".1f"),
            str(len(attempt.layers_fp32)) if attempt.layers_fp32 else "none",
            status,
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    layers = [(n, a) for n, a in enumerate(attempts, 1) if a.layers_fp32]
    if layers:
        lines += ["", "Layers kept in fp32, which a plain quantization runs in int8:", ""]
        lines += [f"- attempt {n} ({a.name}): " + ", ".join(f"`{x}`" for x in a.layers_fp32) for n, a in layers]
    return [*lines, ""]


def _control_cell(settings: dict[str, str | int | float | bool | None]) -> str:
    metric, max_drop = settings.get("accuracy_control"), settings.get("max_drop")
    if metric is None:
        return "–"
    limit = f"{max_drop:g}" if isinstance(max_drop, float | int) else str(max_drop)
    samples = settings.get("validation_samples")
    return f"{metric}, max drop {limit}" + (f", {samples} samples" if samples is not None else "")


def pruning_section(pruning: PruningSummary) -> list[str]:
    """What pruning reached, layer by layer: the target is a request, these are the zeros in the weights."""
    lines = [
        "## Pruning",
        "",
        f"- Target {100 * pruning.target:.1f}% of the Dense/convolution kernel weights ({pruning.scope}); reached "
        f"{100 * pruning.overall:.1f}% overall. The variants are measured against the unpruned model.",
    ]
    if pruning.epochs:
        loss = _num(pruning.final_loss, ".4f")
        acc = _num(None if pruning.final_accuracy is None else 100 * pruning.final_accuracy, ".2f")
        lines.append(
            f"- Fine-tuned {pruning.epochs} epochs on {pruning.train_samples} samples with the zeros held fixed; "
            f"last epoch: loss {loss}, training top-1 {acc}%"
        )
    else:
        lines.append("- Not fine-tuned (give --train-data and --epochs to recover accuracy)")
    lines.append(
        "- Zeros make only `tflite/sparse_fp32` faster, on XNNPACK and for MobileNet-shaped graphs (--prune-scope "
        "xnnpack checks the graph qualifies); every other variant runs at the unpruned model's speed"
    )
    lines += ["", "| Layer kernel | Weights | Zeros | Sparsity % |", "|---|---|---|---|"]
    lines += [f"| `{x.name}` | {x.weights} | {x.zeros} | {100 * x.sparsity:.1f} |" for x in pruning.layers]
    return [*lines, ""]


def plot(report: ConversionReport, path: Path) -> None:
    """Quality against latency, marker area by file size; flagged variants in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report.variants if r.status == "ok" and r.speed is not None and r.drop is not None]
    boxes = all(r.detection is not None for r in rows) and bool(rows)
    labelled = all(r.accuracy is not None for r in rows) and bool(rows)
    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    largest = max((r.size_bytes or 0 for r in rows), default=0) or 1
    for r in rows:
        assert r.speed is not None and r.drop is not None
        quality = _quality(r, boxes, labelled)
        area = 40 + 400 * (r.size_bytes or 0) / largest
        color = "tab:red" if r.flagged else "tab:blue"
        axes.scatter(r.speed.latency.median_ms, quality, s=area, c=color, alpha=0.6, edgecolors="black")
        axes.annotate(r.variant_id, (r.speed.latency.median_ms, quality), textcoords="offset points", xytext=(6, 6))
    plot_unpruned(axes, report, lambda r: _quality(r, boxes, labelled))
    axes.set_xlabel("median latency (ms, CPU)")
    axes.set_ylabel(
        "mAP@0.5 (%)" if boxes else "top-1 accuracy (%)" if labelled else "agreement with fp32 (100 - drop)"
    )
    axes.set_title(f"{report.name}: variants (marker area = file size, red = do not ship)")
    if not rows:
        axes.text(0.5, 0.5, "no variant was measured", ha="center", va="center", transform=axes.transAxes)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def _quality(result: VariantResult, boxes: bool, labelled: bool) -> float:
    """The plot's vertical axis: the task's own accuracy where it was measured, else agreement with fp32."""
    if boxes and result.detection is not None:
        return 100 * result.detection.map50
    if labelled and result.accuracy is not None:
        return 100 * result.accuracy.top1
    return 100 - (result.drop.points if result.drop is not None else 0.0)
