"""Per-pipeline figures for the stats topic, the log and Prometheus.

Counters only grow; rates are computed between two reports. Stage latencies keep the last few
thousand samples, enough for p50/p90/p99 without unbounded memory on a box that runs for months.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

STAGES = ("pre", "infer", "post", "total")
_WINDOW = 2048


@dataclass
class PipelineStats:
    name: str
    started: float = field(default_factory=time.monotonic)
    results: int = 0  # inferences decoded
    published: int = 0  # result messages handed to the publisher
    filtered: int = 0  # results not published: unchanged, or below the score threshold
    errors: int = 0  # inferences, decodes or outputs that failed
    crops: int = 0  # crops run through the pipeline's cascade models
    crops_failed: int = 0  # crops skipped because preprocessing them failed
    latencies: dict[str, deque[float]] = field(default_factory=lambda: {s: deque(maxlen=_WINDOW) for s in STAGES})
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, latency_ms: dict[str, float], published: bool) -> None:
        with self.lock:
            self.results += 1
            if published:
                self.published += 1
            else:
                self.filtered += 1
            for stage, value in latency_ms.items():
                self.latencies[stage].append(value)

    def error(self) -> None:
        with self.lock:
            self.errors += 1

    def cascade_crops(self, run: int, failed: int) -> None:
        with self.lock:
            self.crops += run
            self.crops_failed += failed

    def percentiles(self) -> dict[str, dict[str, float]]:
        with self.lock:
            samples = {stage: np.fromiter(values, float) for stage, values in self.latencies.items()}
        return {
            stage: {
                "p50": round(float(np.percentile(v, 50)), 3),
                "p90": round(float(np.percentile(v, 90)), 3),
                "p99": round(float(np.percentile(v, 99)), 3),
            }
            for stage, v in samples.items()
            if v.size
        }


class RateMeter:
    """Per-second rates of growing counters over a trailing window, however often and by whom asked.

    The stats topic and a Prometheus scrape both read rates; measured "since the last call", each
    would shorten the other's interval. Each counter keeps the samples of the last `window_s` (and
    one before), starting from zero at the moment its pipeline started, so the very first report
    already gives the rate since the start instead of 0.
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._samples: dict[tuple[str, float], deque[tuple[float, int]]] = {}

    def rate(self, key: str, count: int, since: float) -> float:
        """The rate of `count` (a counter that was 0 at monotonic time `since`) over the window."""
        now = time.monotonic()
        samples = self._samples.get((key, since))
        if samples is None:  # a new counter, or one restarted with its pipeline: forget the old one
            for stale in [known for known in self._samples if known[0] == key]:
                del self._samples[stale]
            samples = self._samples[(key, since)] = deque([(since, 0)])
        samples.append((now, count))
        while len(samples) > 2 and samples[1][0] <= now - self.window_s:
            samples.popleft()
        first_at, first_count = samples[0]
        return round((count - first_count) / (now - first_at), 2) if now > first_at else 0.0


def snapshot_dict(stats: PipelineStats, meter: RateMeter, frames_in: int, dropped: int) -> dict[str, Any]:
    with stats.lock:
        results, published, filtered, errors = stats.results, stats.published, stats.filtered, stats.errors
        crops, crops_failed = stats.crops, stats.crops_failed
    return {
        "fps_in": meter.rate(f"{stats.name}.in", frames_in, stats.started),
        "fps_out": meter.rate(f"{stats.name}.out", results, stats.started),
        "frames_in": frames_in,
        "dropped": dropped,
        "results": results,
        "published": published,
        "filtered": filtered,
        "errors": errors,
        "crops": crops,
        "crops_failed": crops_failed,
        "latency_ms": stats.percentiles(),
    }
