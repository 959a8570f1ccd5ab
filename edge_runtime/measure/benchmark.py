"""Measuring a loaded model: synchronous latency percentiles and asynchronous throughput.

Inputs are prepared once, outside the timed region, exactly as the backends' own tools do
(`benchmark_app`, `litert-benchmark`), so the figures compare like with like: what is timed is the
backend call, through our backend layer.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import numpy as np

from edge_runtime.measure.fidelity import feed_for, synthetic_frames
from edge_runtime.placement.model import LoadedModel

ProgressFn = Callable[[str, float], None]


@dataclass(frozen=True)
class LatencyStats:
    count: int
    median_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    min_ms: float

    @classmethod
    def from_ns(cls, durations_ns: list[int]) -> LatencyStats:
        ms = np.asarray(durations_ns, dtype=np.float64) / 1e6
        return cls(
            count=len(ms),
            median_ms=float(np.median(ms)),
            p90_ms=float(np.percentile(ms, 90)),
            p99_ms=float(np.percentile(ms, 99)),
            mean_ms=float(ms.mean()),
            min_ms=float(ms.min()),
        )


@dataclass(frozen=True)
class ThroughputStats:
    count: int
    in_flight: int
    throughput_fps: float


@dataclass(frozen=True)
class Measurement:
    latency: LatencyStats
    throughput: ThroughputStats | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bench_feed(model: LoadedModel, seed: int = 0) -> list[np.ndarray]:
    size = model.input_specs[0].spatial_size or (224, 224)
    return feed_for(model, synthetic_frames(1, size[0], size[1], seed), seed)[0]


def measure_latency(
    model: LoadedModel,
    feed: list[np.ndarray],
    seconds: float,
    warmup: int = 5,
    progress: ProgressFn | None = None,
) -> LatencyStats:
    infer = model.backend.infer
    for _ in range(warmup):
        infer(feed)
    durations: list[int] = []
    clock = time.perf_counter_ns
    deadline = clock() + int(seconds * 1e9)
    next_report = 0
    while True:
        start = clock()
        infer(feed)
        end = clock()
        durations.append(end - start)
        if end >= deadline and len(durations) >= 10:
            break
        if progress is not None and end >= next_report:
            progress("latency", 1 - (deadline - end) / (seconds * 1e9))
            next_report = end + 200_000_000
    return LatencyStats.from_ns(durations)


def measure_throughput(
    model: LoadedModel,
    feed: list[np.ndarray],
    seconds: float,
    max_in_flight: int | None = None,
    progress: ProgressFn | None = None,
) -> ThroughputStats:
    done = 0
    errors: list[BaseException] = []
    lock = threading.Lock()

    def on_done(_: Any, outputs: Any, error: BaseException | None) -> None:
        nonlocal done
        with lock:
            done += 1
            if error is not None:
                errors.append(error)

    runner = model.backend.async_runner(on_done, max_in_flight)
    try:
        for _ in range(runner.capacity):
            runner.submit(feed)
        runner.wait_all()
        with lock:
            done = 0
        start = time.perf_counter()
        deadline = start + seconds
        submitted = 0
        next_report = start
        while (now := time.perf_counter()) < deadline or submitted < 10:
            runner.submit(feed)
            submitted += 1
            if progress is not None and now >= next_report:
                progress("throughput", (now - start) / seconds)
                next_report = now + 0.2
        runner.wait_all()
        elapsed = time.perf_counter() - start
    finally:
        runner.close()
    if errors:
        raise errors[0]
    return ThroughputStats(count=done, in_flight=runner.capacity, throughput_fps=done / elapsed)


class Progress:
    """A one-line progress indication on stderr: redrawn in place on a terminal, line by line otherwise."""

    def __init__(self, total: int, stream: TextIO | None = None):
        self.total = total
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.index = 0
        self.label = ""
        self._last_phase = ""

    def start(self, label: str) -> None:
        self.index += 1
        self.label = label
        self._last_phase = ""

    def __call__(self, phase: str, fraction: float) -> None:
        if self.tty:
            width = 20
            filled = int(max(0.0, min(1.0, fraction)) * width)
            bar = "#" * filled + "." * (width - filled)
            self.stream.write(f"\r[{self.index}/{self.total}] {self.label} {phase:<10} [{bar}]")
            self.stream.flush()
        elif phase != self._last_phase:
            self.stream.write(f"[{self.index}/{self.total}] {self.label}: measuring {phase}\n")
            self.stream.flush()
        self._last_phase = phase

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()
