"""The unpruned variants built beside the pruned ones, and the speedup pruning bought, timed alternating.

A speedup is only worth reporting against the same model unpruned, built in the same run with the same
settings and timed on the same machine under the same load. So when channels are pruned, the unpruned
model's fp32 and int8 variants of each backend asked for are built into the scratch folder (not shipped)
and evaluated like every variant; then each pruned variant and its unpruned counterparts are timed in
alternating rounds, and the speedup is the median of the per-round ratios. Alternating keeps a burst of
other work on the machine from landing on one side only. Beside each latency goes the process CPU time per
inference (all the backend's threads together): on a machine shared with other work, latency swings with
the load while the CPU an inference costs moves far less, so the two together tell a slow round from a
costly model.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from converters.progress import step
from converters.variants import BUILDERS
from edge_runtime.measure.benchmark import bench_feed, measure_latency

if TYPE_CHECKING:
    from converters.context import BuildContext, Builder
    from converters.report import ConversionReport, VariantResult
    from converters.sources import SourceModel
    from edge_runtime.placement.model import LoadedModel

__all__ = ["BASELINE_PRECISIONS", "Speedup", "baseline_ids", "build_unpruned", "compare_unpruned", "measure_speedups"]

BASELINE_PRECISIONS = ("fp32", "int8")
ROUNDS = 7  # odd, so the median is one round's ratio; enough that one disturbed round cannot move it
WARMUP = 5  # measure_latency's untimed warm-up inferences, which the CPU time of a round includes


@dataclass(frozen=True)
class Speedup:
    variant_id: str  # the pruned variant
    against: str  # the unpruned variant it is compared with
    ratio: float  # median over rounds of unpruned latency / pruned latency
    pruned_ms: float  # median latency over rounds
    unpruned_ms: float
    rounds: int
    pruned_cpu_ms: float | None = None  # median over rounds of process CPU time per inference
    unpruned_cpu_ms: float | None = None


def baseline_ids(variant_ids: tuple[str, ...]) -> tuple[str, ...]:
    """The unpruned variants worth building: fp32 and int8 of each backend among the pruned variants."""
    backends = dict.fromkeys(vid.split("/")[0] for vid in variant_ids)
    return tuple(
        f"{backend}/{precision}"
        for backend in backends
        for precision in BASELINE_PRECISIONS
        if f"{backend}/{precision}" in variant_ids
    )


def compare_unpruned(
    ctx: BuildContext,
    unpruned: SourceModel,
    report: ConversionReport,
    attempt: Callable[[BuildContext, str, Builder], VariantResult],
    load: Callable[[Path, VariantResult], LoadedModel],
    folder: Path,
    seed: int,
) -> None:
    """The unpruned fp32 and int8 variants built into `folder` and evaluated beside the pruned ones in `report`,
    and each pruned variant timed against them (unless --bench-seconds is 0)."""
    ids = tuple(r.variant_id for r in report.variants)
    report.unpruned = build_unpruned(ctx, unpruned, folder, ids, attempt)
    if report.bench_seconds > 0:
        report.speedups = measure_speedups(
            report.variants,
            report.unpruned,
            partial(load, ctx.out_dir),
            partial(load, folder),
            report.bench_seconds,
            seed,
        )


def build_unpruned(
    ctx: BuildContext,
    unpruned: SourceModel,
    folder: Path,
    variant_ids: tuple[str, ...],
    attempt: Callable[[BuildContext, str, Builder], VariantResult],
) -> list[VariantResult]:
    """The unpruned model's fp32 and int8 variants, built into `folder` and evaluated by `attempt`."""
    ids = baseline_ids(variant_ids)
    step(f"building the unpruned {', '.join(ids)} to compare with")
    context = replace(ctx, source=unpruned, out_dir=folder)
    return [attempt(context, vid, BUILDERS[vid]) for vid in ids]


def measure_speedups(
    pruned: list[VariantResult],
    unpruned: list[VariantResult],
    load_pruned: Callable[[VariantResult], LoadedModel],
    load_unpruned: Callable[[VariantResult], LoadedModel],
    seconds: float,
    seed: int,
) -> list[Speedup]:
    """Each measured pruned variant against the unpruned one of its own id and the unpruned fp32 of its backend."""
    usable = {r.variant_id: r for r in unpruned if r.status == "ok" and r.speed is not None}
    speedups = []
    for result in pruned:
        if result.status != "ok" or result.speed is None:
            continue
        backend = result.variant_id.split("/")[0]
        against = [vid for vid in dict.fromkeys((result.variant_id, f"{backend}/fp32")) if vid in usable]
        if not against:
            continue
        models = [load_pruned(result), *(load_unpruned(usable[vid]) for vid in against)]
        try:
            step(f"{result.variant_id}: timing against unpruned {', '.join(against)}, {ROUNDS} alternating rounds")
            medians, cpu = _alternating_medians(models, seconds, seed)
        finally:
            for model in models:
                model.close()
        for index, vid in enumerate(against, start=1):
            ratios = [other / mine for mine, other in zip(medians[0], medians[index], strict=True)]
            speedups.append(
                Speedup(
                    variant_id=result.variant_id,
                    against=vid,
                    ratio=statistics.median(ratios),
                    pruned_ms=statistics.median(medians[0]),
                    unpruned_ms=statistics.median(medians[index]),
                    rounds=ROUNDS,
                    pruned_cpu_ms=statistics.median(cpu[0]),
                    unpruned_cpu_ms=statistics.median(cpu[index]),
                )
            )
    return speedups


def _alternating_medians(
    models: list[LoadedModel], seconds: float, seed: int
) -> tuple[list[list[float]], list[list[float]]]:
    """Per model, the median latency (ms) of each round and its process CPU time (ms) per inference; every round
    times each model once, in turn."""
    feeds = [bench_feed(model, seed) for model in models]
    medians: list[list[float]] = [[] for _ in models]
    cpu: list[list[float]] = [[] for _ in models]
    for _ in range(ROUNDS):
        for model, feed, store, cpu_store in zip(models, feeds, medians, cpu, strict=True):
            started = time.process_time()
            stats = measure_latency(model, feed, seconds / ROUNDS, warmup=WARMUP)
            cpu_store.append((time.process_time() - started) * 1e3 / (stats.count + WARMUP))
            store.append(stats.median_ms)
    return medians, cpu
