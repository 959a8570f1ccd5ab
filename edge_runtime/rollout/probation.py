"""Probation: after the switch the new model runs live for a while, and the first sign of trouble rolls it back.

The shadow judged the new model on a sample; probation judges the pipeline as it now runs, on every
item, for `seconds`. It watches what the daemon already counts:
- errors: inferences, decodes or outputs that failed (at most `max_errors`, none by default);
- pace: results against the items the source produced over the same time, delivered or dropped
  (at least `min_pace`, less the few items still in flight): a model too slow for the camera shows as
  a source that keeps dropping frames;
- progress: a result at least every `stall_seconds` while the source delivers, the watchdog's rule;
- the source itself ending is not the model's fault, and ends probation early with what was seen.
A failure is reported at once, with what was measured, so the rollback does not wait out the period.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from edge_runtime.pipeline.streaming import Pipeline

__all__ = ["ProbationLimits", "ProbationVerdict", "watch", "watch_all"]

IN_FLIGHT = 8  # items between the source and a result at any time: the runner's requests and the post queue


@dataclass(frozen=True)
class ProbationLimits:
    seconds: float = 60.0
    max_errors: int = 0
    min_pace: float = 0.9  # results per item delivered, over the whole period so far
    stall_seconds: float = 10.0
    poll_seconds: float = 0.25


@dataclass(frozen=True)
class ProbationVerdict:
    passed: bool
    reason: str
    seconds: float
    items: int
    results: int
    errors: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def watch(pipeline: Pipeline, limits: ProbationLimits, stop: threading.Event | None = None) -> ProbationVerdict:
    """Watch `pipeline` for the probation period; returns as soon as it fails, or when the period is over."""
    source, stats = pipeline.source.stats, pipeline.stats
    with stats.lock:
        results0, errors0 = stats.results, stats.errors
    produced0 = source.delivered + source.dropped
    started = last_progress = time.monotonic()
    last_results = results0

    def verdict(passed: bool, reason: str) -> ProbationVerdict:
        with stats.lock:
            results, errors = stats.results - results0, stats.errors - errors0
        elapsed = round(time.monotonic() - started, 2)
        return ProbationVerdict(passed, reason, elapsed, source.delivered + source.dropped - produced0, results, errors)

    while True:
        now = time.monotonic()
        with stats.lock:
            results, errors = stats.results - results0, stats.errors - errors0
        produced = source.delivered + source.dropped - produced0
        if errors > limits.max_errors:
            return verdict(
                False, f"{errors} errors in {now - started:.1f} s of probation (at most {limits.max_errors})"
            )
        if stats.results != last_results:
            last_results, last_progress = stats.results, now
        elif produced > results and now - last_progress > limits.stall_seconds:
            return verdict(False, f"no result for {now - last_progress:.1f} s while the source delivered items")
        if pipeline.finished.is_set():
            return verdict(errors <= limits.max_errors, "the source ended during probation")
        if now - started >= limits.seconds:
            if produced > IN_FLIGHT and results < limits.min_pace * (produced - IN_FLIGHT):
                return verdict(
                    False,
                    f"{results} results for {produced} items the source produced: the model keeps up with "
                    f"{results / produced:.0%} of the source (at least {limits.min_pace:.0%} needed)",
                )
            return verdict(True, f"{results} results, {errors} errors in {limits.seconds:.0f} s of probation")
        if stop is not None and stop.wait(limits.poll_seconds):
            return verdict(False, "probation was stopped")
        if stop is None:
            time.sleep(limits.poll_seconds)


def watch_all(
    pipelines: list[Pipeline],
    failed_requests: Callable[[], int],
    serving: bool,
    limits: ProbationLimits,
    stop: threading.Event,
) -> tuple[dict[str, ProbationVerdict], int]:
    """Every switched pipeline watched at once, and served requests counted: the first failure ends them all.

    Returns each pipeline's verdict and the requests that failed during probation (`failed_requests()`
    counts them from the start of time; served models have no frames to pace, so errors are their gate).
    """
    verdicts: dict[str, ProbationVerdict] = {}
    halt = threading.Event()  # set by a failing pipeline's watcher, by failed requests, or by an abort

    def one(pipeline: Pipeline) -> None:
        verdict = watch(pipeline, limits, halt)
        verdicts[pipeline.name] = verdict
        if not verdict.passed:
            halt.set()

    watchers = [threading.Thread(target=one, args=(p,), name=f"probation-{p.name}", daemon=True) for p in pipelines]
    for thread in watchers:
        thread.start()
    before = failed_requests()
    deadline = time.monotonic() + limits.seconds
    failed = 0
    while any(t.is_alive() for t in watchers) or (serving and time.monotonic() < deadline and not halt.is_set()):
        failed = failed_requests() - before
        if failed > limits.max_errors or stop.wait(0.1):
            halt.set()
            break
    for thread in watchers:
        thread.join()
    return verdicts, failed
