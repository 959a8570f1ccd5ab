"""The report's channel-pruning section: what was removed, what it cost in accuracy, and what it bought in speed.

The pruned variants sit in the report's main table, judged against the unpruned model like every
variant (so one that lost more than the threshold is flagged "do not ship"). This section adds the
trade: MACs and parameters before and after, the unpruned / pruned / distilled accuracy, the unpruned
variants built in the same run, and the speedup of each pruned variant timed alternating against them.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from converters.prune_channels import ChannelPruningSummary
    from converters.pruned_baselines import Speedup
    from converters.report import ConversionReport, VariantResult

__all__ = ["channel_pruning_dict", "channel_pruning_section", "plot_unpruned"]


def channel_pruning_dict(report: ConversionReport) -> dict[str, Any]:
    """What report.json holds about channel pruning: the summary, the unpruned variants and the speedups."""
    summary = report.channel_pruning
    assert summary is not None
    data = asdict(summary)
    data["macs_ratio"] = summary.macs_ratio
    data["unpruned_variants"] = [_variant_dict(r) for r in report.unpruned]
    data["speedups"] = [asdict(s) for s in report.speedups]
    return data


def _variant_dict(result: VariantResult) -> dict[str, Any]:
    row = asdict(result)
    row.pop("built")
    row["files"] = []
    return row


def channel_pruning_section(report: ConversionReport) -> list[str]:
    summary = report.channel_pruning
    assert summary is not None
    lines = [
        "## Channel pruning",
        "",
        f"- Removed {summary.share:.0%} of the channels ({summary.scope}) of {summary.groups} channel groups "
        f"DepGraph found, counts rounded to multiples of {summary.round_to}, at most {summary.max_layer_share:.0%} "
        f"of a layer; kept whole: {', '.join(f'`{n}`' for n in summary.kept_whole) or 'none'}",
        f"- MACs {_count(summary.macs_before)} → {_count(summary.macs_after)} ({summary.macs_ratio:.2f}× fewer); "
        f"parameters {_count(summary.params_before)} → {_count(summary.params_after)}",
        f"- Output shapes unchanged; the pruned module and its ONNX export differ by at most "
        f"{summary.export_difference:.2g}. Every variant in the Variants table is built from that ONNX file.",
    ]
    lines += _quality_lines(summary)
    lines += [f"- {note}" for note in summary.notes]
    lines += _speedup_lines(report.speedups, report.unpruned)
    lines += ["", "| Layer | Channels before | Channels after |", "|---|---|---|"]
    lines += [f"| `{x.name}` | {x.before} | {x.after} |" for x in summary.layers]
    return [*lines, ""]


def _quality_lines(summary: ChannelPruningSummary) -> list[str]:
    def pct(value: float | None) -> str:
        return "–" if value is None else f"{100 * value:.2f}%"

    what = "top-1" if summary.metric == "top-1" else f"{summary.metric} with the unpruned model"
    lines = [
        f"- Accuracy ({what}, PyTorch, evaluation set): unpruned {pct(summary.unpruned_quality)}, pruned "
        f"{pct(summary.pruned_quality)}, pruned and distilled {pct(summary.distilled_quality)}"
    ]
    run = summary.distillation
    if run is None:
        lines.append("- Not distilled (--distill-epochs 0): the pruned weights are as pruning left them")
    else:
        data = "labelled --train-data (distillation and cross-entropy)" if run.labelled else "unlabelled samples"
        lines.append(
            f"- Distilled from the unpruned model: {run.epochs} epochs on {run.samples} {data}, on {run.device}, "
            f"{run.seconds:.0f} s; loss {run.first_loss:.4g} → {run.final_loss:.4g}"
        )
    return lines


def _speedup_lines(speedups: list[Speedup], unpruned: list[VariantResult]) -> list[str]:
    lines = []
    for result in unpruned:
        speed = result.speed
        state = result.message if result.status != "ok" else "ok"
        latency = f"{speed.latency.median_ms:.3f} ms" if speed is not None else "not timed"
        drop = f"drop {result.drop.points:.2f} points" if result.drop is not None else "drop not measured"
        lines.append(f"- Unpruned `{result.variant_id}` (same run, not packaged): {latency}, {drop}; {state}")
    if not speedups:
        return [*lines, "- Speedup: not measured (--bench-seconds 0, or no unpruned variant ran)"]
    lines += [
        "",
        "| Pruned variant | Against unpruned | Speedup | Pruned (ms) | Unpruned (ms) | CPU ms / inference, pruned "
        "→ unpruned | Rounds |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| `{s.variant_id}` | `{s.against}` | {s.ratio:.2f}× | {s.pruned_ms:.3f} | {s.unpruned_ms:.3f} | "
        f"{_cpu(s.pruned_cpu_ms)} → {_cpu(s.unpruned_cpu_ms)} | {s.rounds} |"
        for s in speedups
    ]
    lines.append("")
    lines.append("Speedup: median over alternating rounds of the unpruned latency over the pruned one, this machine.")
    return lines


def _cpu(ms: float | None) -> str:
    return "?" if ms is None else f"{ms:.3f}"


def _count(value: int) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.2f}{unit}"
    return str(value)


def plot_unpruned(axes: Any, report: ConversionReport, quality: Any) -> None:
    """The unpruned variants as grey points beside the pruned ones: the latency-vs-accuracy trade."""
    for result in report.unpruned:
        if result.status != "ok" or result.speed is None or result.drop is None:
            continue
        y = quality(result)
        axes.scatter(result.speed.latency.median_ms, y, s=60, c="tab:gray", alpha=0.6, edgecolors="black")
        axes.annotate(
            f"unpruned {result.variant_id}",
            (result.speed.latency.median_ms, y),
            textcoords="offset points",
            xytext=(6, -12),
            color="dimgray",
        )
