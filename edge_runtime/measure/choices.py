"""Measuring every way this box can run a model, and keeping the fastest that stays faithful.

One set of rules for the two places that choose by measurement: an operator's `edge-runtime bench
--select`, and a model configured with `select: fastest`, which the box measures on its own once per
package release. Each candidate is compared with the fp32 reference first, and only those within the
tolerance are timed. Timing alternates between the candidates round by round, the order reversed
every other round, so a load that comes and goes (a live pipeline beside the measurement, a CPU
clocking down) falls on every candidate alike; each figure is the median over the rounds.

Every candidate stays loaded while the rounds run, so that a round times inference, not loading.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from edge_runtime.backends import BACKENDS, backend_class
from edge_runtime.backends.base import RunsOn
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.hardware.facts import Hardware
from edge_runtime.measure.benchmark import (
    LatencyStats,
    Measurement,
    Progress,
    ThroughputStats,
    bench_feed,
    measure_latency,
    measure_throughput,
)
from edge_runtime.measure.fidelity import FidelityReport, compare, load_reference
from edge_runtime.package.loader import ModelPackage
from edge_runtime.placement.loading import load_candidate
from edge_runtime.placement.model import LoadedModel
from edge_runtime.placement.profiles import Choice, DeviceProfile
from edge_runtime.placement.selection import Candidate, ChosenBy, Overrides, model_key, select, store_choice

__all__ = [
    "ChoiceResult",
    "Hint",
    "every_runnable_choice",
    "fastest",
    "measure_choices",
    "store_fastest",
]

log = logging.getLogger(__name__)

Hint = Literal["latency", "throughput"]


@dataclass
class ChoiceResult:
    candidate: Candidate
    runs_on: RunsOn | None = None
    load_ms: float | None = None
    rounds: list[Measurement] = field(default_factory=list)
    fidelity: FidelityReport | None = None
    error: str | None = None
    model: LoadedModel | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return self.candidate.choice.label()

    @property
    def usable(self) -> bool:
        return self.error is None and (self.fidelity is None or self.fidelity.passed)

    @property
    def measurement(self) -> Measurement | None:
        """The median of each figure over the rounds (one round: that round's figures)."""
        if not self.rounds:
            return None
        latencies = [r.latency for r in self.rounds]
        latency = LatencyStats(
            count=sum(s.count for s in latencies),
            **{
                name: statistics.median(getattr(s, name) for s in latencies)
                for name in ("median_ms", "p90_ms", "p99_ms", "mean_ms", "min_ms")
            },
        )
        throughputs = [r.throughput for r in self.rounds if r.throughput is not None]
        throughput = None
        if throughputs:
            throughput = ThroughputStats(
                count=sum(t.count for t in throughputs),
                in_flight=throughputs[0].in_flight,
                throughput_fps=statistics.median(t.throughput_fps for t in throughputs),
            )
        return Measurement(latency, throughput)

    def speed_key(self, hint: Hint) -> float:
        """Smaller is faster: the median latency, or the negated throughput for the throughput hint."""
        measured = self.measurement
        assert measured is not None
        if hint == "throughput" and measured.throughput is not None:
            return -measured.throughput.throughput_fps
        return measured.latency.median_ms

    def metrics(self) -> dict[str, float]:
        """The figures stored with a choice and shown by `probe --model` and the stats."""
        measured = self.measurement
        assert measured is not None
        figures = {"median_ms": measured.latency.median_ms, "rounds": float(len(self.rounds))}
        if measured.throughput is not None:
            figures["throughput_fps"] = measured.throughput.throughput_fps
        if self.fidelity is not None:
            figures["max_rel_error"] = self.fidelity.max_rel_error
        return figures

    def to_dict(self) -> dict[str, Any]:
        runs_on = self.runs_on
        measured = self.measurement
        return {
            "choice": self.label,
            "backend": self.candidate.choice.backend,
            "device": runs_on.device if runs_on else self.candidate.choice.device,
            "device_name": runs_on.device_name if runs_on else self.candidate.device_name,
            "variant": self.candidate.variant_id,
            "precision": runs_on.precision if runs_on else None,
            "details": dict(runs_on.details) if runs_on else {},
            "load_ms": self.load_ms,
            "rounds": len(self.rounds),
            **(measured.to_dict() if measured else {"latency": None, "throughput": None}),
            "fidelity": self.fidelity.to_dict() if self.fidelity else None,
            "error": self.error,
        }


def every_runnable_choice(package: ModelPackage, hardware: Hardware, overrides: Overrides) -> list[Candidate]:
    """Every backend, device, loadable variant and precision this box offers, as candidates with reasons.

    Variants the converter flagged "do not ship", and int8 variants this CPU's int8 check refused, are
    left out by the selection rules themselves."""
    choices = []
    for backend, status in hardware.libraries.items():
        if not status.available:
            continue
        for fields in backend_class(backend).measurable_choices(status, hardware):
            for variant_id, variant in package.manifest.variants.items():
                if variant.format in BACKENDS[backend].formats:
                    choices.append(Choice.model_validate({"backend": backend, **fields, "variants": [variant_id]}))
    if not choices:
        return []
    profile = DeviceProfile(name="measure-every-choice", choices=tuple(choices))
    return select(package, hardware, profile=profile, overrides=overrides).runnable()


def measure_choices(
    package: ModelPackage,
    candidates: list[Candidate],
    *,
    hint: Hint,
    seconds: float,
    rounds: int = 1,
    threads: int | None = None,
    tolerance: float | None = None,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> list[ChoiceResult]:
    """Load every candidate, compare it with the fp32 reference when `tolerance` is given, then time the
    usable ones: latency for `seconds`, then throughput for `seconds`, each split over alternating `rounds`."""
    results = [ChoiceResult(candidate) for candidate in candidates]
    references: dict[str, LoadedModel] = {}
    try:
        for result in results:
            _load(package, result, hint, threads, tolerance, references)
        for model in references.values():
            model.close()
        references.clear()
        timed = [r for r in results if r.usable and r.model is not None]
        for round_index in range(rounds):
            for result in timed if round_index % 2 == 0 else reversed(timed):
                if stop is not None and stop.is_set():
                    return results
                if progress is not None:
                    progress.start(f"{result.label} {result.candidate.variant_id} (round {round_index + 1})")
                _time_one(result, seconds / rounds, progress)
    finally:
        if progress is not None:
            progress.finish()
        for result in results:
            if result.model is not None:
                result.model.close()
                result.model = None
        for model in references.values():
            model.close()
    return results


def _load(
    package: ModelPackage,
    result: ChoiceResult,
    hint: Hint,
    threads: int | None,
    tolerance: float | None,
    references: dict[str, LoadedModel],
) -> None:
    choice = result.candidate.choice
    choice = choice.model_copy(update={"hint": hint, "threads": threads or choice.threads})
    try:
        started = time.perf_counter()
        result.model = load_candidate(package, replace(result.candidate, choice=choice))
        result.load_ms = (time.perf_counter() - started) * 1000
        result.runs_on = result.model.backend.runs_on
        if tolerance is not None:
            reference = load_reference(package, result.candidate.variant_id, references)
            result.fidelity = compare(result.model, reference, tolerance=tolerance)
    except EdgeRuntimeError as error:
        result.error = str(error)
    if not result.usable and result.model is not None:
        result.model.close()
        result.model = None


def _time_one(result: ChoiceResult, seconds: float, progress: Progress | None) -> None:
    model = result.model
    assert model is not None
    try:
        feed = bench_feed(model)
        latency = measure_latency(model, feed, seconds, progress=progress)
        throughput = measure_throughput(model, feed, seconds, progress=progress)
    except EdgeRuntimeError as error:
        result.error = str(error)
        return
    result.rounds.append(Measurement(latency, throughput))


def fastest(results: list[ChoiceResult], hint: Hint) -> ChoiceResult | None:
    """The fastest usable result by the hint's measure; None when nothing usable was timed."""
    usable = [r for r in results if r.usable and r.rounds]
    return min(usable, key=lambda r: r.speed_key(hint)) if usable else None


def store_fastest(
    package: ModelPackage, results: list[ChoiceResult], hint: Hint, state_dir: Path, chosen_by: ChosenBy
) -> ChoiceResult | None:
    """Store the fastest usable result as this box's choice for the package's files."""
    best = fastest(results, hint)
    if best is None:
        return None
    assert best.candidate.variant_id is not None
    store_choice(
        state_dir, model_key(package), best.candidate.choice, best.candidate.variant_id, best.metrics(), chosen_by
    )
    return best
