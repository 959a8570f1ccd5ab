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
    results: int = 0  # inferences decoded
    published: int = 0  # result messages handed to the publisher
    filtered: int = 0  # results not published: unchanged, or below the score threshold
    errors: int = 0  # inferences, decodes or outputs that failed
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
    """Turns growing counters into per-second rates between successive calls."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int]] = {}

    def rate(self, key: str, count: int) -> float:
        now = time.monotonic()
        previous = self._last.get(key)
        self._last[key] = (now, count)
        if previous is None or now <= previous[0]:
            return 0.0
        return round((count - previous[1]) / (now - previous[0]), 2)


def snapshot_dict(stats: PipelineStats, meter: RateMeter, frames_in: int, dropped: int) -> dict[str, Any]:
    with stats.lock:
        results, published, filtered, errors = stats.results, stats.published, stats.filtered, stats.errors
    return {
        "fps_in": meter.rate(f"{stats.name}.in", frames_in),
        "fps_out": meter.rate(f"{stats.name}.out", results),
        "frames_in": frames_in,
        "dropped": dropped,
        "results": results,
        "published": published,
        "filtered": filtered,
        "errors": errors,
        "latency_ms": stats.percentiles(),
    }
