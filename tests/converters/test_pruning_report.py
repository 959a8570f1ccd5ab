"""The report's channel-pruning section: the trade in figures, and what it says when parts were not measured."""

from __future__ import annotations

from converters.context import QuantizationSettings
from converters.distillation import DistillResult
from converters.prune_channels import ChannelPruningSummary, LayerChannels
from converters.pruned_baselines import Speedup
from converters.pruning_report import channel_pruning_dict, channel_pruning_section
from converters.report import ConversionReport, VariantResult
from edge_runtime.package.manifest import MeasuredOn


def _report(distilled: bool, speedups: list[Speedup]) -> ConversionReport:
    summary = ChannelPruningSummary(
        share=0.3,
        scope="per-layer",
        round_to=8,
        max_layer_share=0.8,
        groups=5,
        kept_whole=("head", "stem.0"),
        macs_before=2_000_000,
        macs_after=1_000_000,
        params_before=9_000,
        params_after=5_000,
        layers=(LayerChannels("block.0", 32, 24),),
        export_difference=2e-7,
        metric="top-1",
        unpruned_quality=0.97,
        pruned_quality=0.80,
        distilled_quality=0.965 if distilled else None,
        distillation=DistillResult(10, 1200, False, "cpu", 42.0, 0.5, 0.01) if distilled else None,
    )
    return ConversionReport(
        name="digits",
        source="s",
        reference="r",
        evaluated_on="e",
        calibration="c",
        settings=QuantizationSettings(),
        measured_on=MeasuredOn(cpu="AMD EPYC", int8_features=("x86_64", "avx2")),
        drop_threshold=1.0,
        bench_seconds=1.0,
        channel_pruning=summary,
        unpruned=[VariantResult("openvino/fp32")],
        speedups=speedups,
    )


def test_section_gives_macs_accuracy_and_speedups() -> None:
    speedup = Speedup("openvino/int8", "openvino/fp32", 3.1, 0.1, 0.31, 7, pruned_cpu_ms=0.15, unpruned_cpu_ms=0.45)
    text = "\n".join(channel_pruning_section(_report(True, [speedup])))
    assert "| 0.150 → 0.450 | 7 |" in text
    assert "MACs 2.00M → 1.00M (2.00× fewer)" in text
    assert "unpruned 97.00%, pruned 80.00%, pruned and distilled 96.50%" in text
    assert "10 epochs on 1200 unlabelled samples, on cpu" in text
    assert "| `openvino/int8` | `openvino/fp32` | 3.10× |" in text
    assert "| `block.0` | 32 | 24 |" in text
    data = channel_pruning_dict(_report(True, [speedup]))
    assert data["macs_ratio"] == 2.0 and data["speedups"][0]["ratio"] == 3.1
    assert data["unpruned_variants"][0]["variant_id"] == "openvino/fp32"


def test_section_says_what_was_not_done() -> None:
    text = "\n".join(channel_pruning_section(_report(False, [])))
    assert "Not distilled (--distill-epochs 0)" in text
    assert "Speedup: not measured" in text
