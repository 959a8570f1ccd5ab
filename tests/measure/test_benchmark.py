from __future__ import annotations

import io
from pathlib import Path

from edge_runtime.measure.benchmark import LatencyStats, Progress, bench_feed, measure_latency, measure_throughput
from edge_runtime.package.loader import open_package
from edge_runtime.placement.model import load_model


def test_latency_percentiles_from_durations() -> None:
    stats = LatencyStats.from_ns([1_000_000 * v for v in range(1, 101)])
    assert stats.count == 100
    assert stats.median_ms == 50.5 and stats.min_ms == 1.0
    assert 90 <= stats.p90_ms <= 91 and 99 <= stats.p99_ms <= 100


def test_measurements_on_a_real_model(face_package_dir: Path) -> None:
    model = load_model(open_package(face_package_dir), "tflite/fp32", "litert", {"threads": 1})
    feed = bench_feed(model)
    assert feed[0].shape == (1, 128, 128, 3) and feed[0].dtype.name == "float32"
    latency = measure_latency(model, feed, seconds=0.2)
    assert latency.count >= 10 and 0 < latency.min_ms <= latency.median_ms <= latency.p99_ms
    throughput = measure_throughput(model, feed, seconds=0.2, max_in_flight=2)
    assert throughput.in_flight == 2 and throughput.count >= 10 and throughput.throughput_fps > 0
    model.close()


def test_progress_prints_each_phase_once_when_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(2, stream)
    progress.start("litert CPU tflite/fp32")
    for fraction in (0.1, 0.5, 0.9):
        progress("latency", fraction)
    progress("throughput", 0.2)
    progress.finish()
    assert stream.getvalue().splitlines() == [
        "[1/2] litert CPU tflite/fp32: measuring latency",
        "[1/2] litert CPU tflite/fp32: measuring throughput",
    ]
