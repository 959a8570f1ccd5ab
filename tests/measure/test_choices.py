from __future__ import annotations

import io
import threading
from pathlib import Path

from edge_runtime.measure.benchmark import LatencyStats, Measurement, Progress, ThroughputStats
from edge_runtime.measure.choices import ChoiceResult, every_runnable_choice, fastest, measure_choices
from edge_runtime.measure.fidelity import FidelityReport, OutputError
from edge_runtime.package.loader import open_package
from edge_runtime.placement.loading import look_at_box
from edge_runtime.placement.profiles import Choice
from edge_runtime.placement.selection import Candidate, Overrides


def _candidate(backend: str, variant: str) -> Candidate:
    return Candidate(Choice(backend=backend, device="CPU", variants=(variant,)), "profile", "runnable", "", variant)


def _round(median_ms: float, fps: float) -> Measurement:
    latency = LatencyStats(count=10, median_ms=median_ms, p90_ms=median_ms, p99_ms=median_ms, mean_ms=median_ms,
                           min_ms=median_ms)  # fmt: skip
    return Measurement(latency, ThroughputStats(count=10, in_flight=2, throughput_fps=fps))


def _fidelity(error: float, tolerance: float = 0.02) -> FidelityReport:
    return FidelityReport("candidate", "reference", 4, tolerance, [OutputError("out", error, error, error, error)])


def test_each_figure_is_the_median_over_the_rounds() -> None:
    result = ChoiceResult(_candidate("openvino", "openvino/fp32"), rounds=[_round(3.0, 90), _round(1.0, 300),
                                                                             _round(2.0, 100)])  # fmt: skip
    measured = result.measurement
    assert measured is not None and measured.throughput is not None
    assert measured.latency.median_ms == 2.0 and measured.throughput.throughput_fps == 100
    assert measured.latency.count == 30
    assert result.metrics() == {"median_ms": 2.0, "throughput_fps": 100, "rounds": 3.0}


def test_the_fastest_is_taken_by_the_hints_measure_and_never_an_unfaithful_or_failed_one() -> None:
    steady = ChoiceResult(_candidate("litert", "tflite/fp32"), rounds=[_round(2.0, 400)], fidelity=_fidelity(0.0))
    quick = ChoiceResult(_candidate("openvino", "openvino/fp32"), rounds=[_round(1.0, 300)], fidelity=_fidelity(0.001))
    off = ChoiceResult(_candidate("openvino", "openvino/int8"), rounds=[_round(0.5, 900)], fidelity=_fidelity(0.05))
    broken = ChoiceResult(_candidate("onnxruntime", "onnx/fp32"), rounds=[_round(0.1, 9000)], error="crashed")
    results = [steady, quick, off, broken]
    assert fastest(results, "latency") is quick
    assert fastest(results, "throughput") is steady
    assert fastest([off, broken], "latency") is None


def test_rounds_alternate_between_the_choices_and_each_choice_is_timed_every_round(face_package_dir: Path) -> None:
    package = open_package(face_package_dir)
    candidates = every_runnable_choice(package, look_at_box().hardware, Overrides(backend="litert"))
    candidates += every_runnable_choice(
        package, look_at_box().hardware, Overrides(backend="openvino", precision="fp32")
    )
    assert len(candidates) >= 2
    candidates = candidates[:2]
    stream = io.StringIO()
    results = measure_choices(package, candidates, hint="latency", seconds=0.1, rounds=3, tolerance=0.02,
                              progress=Progress(6, stream))  # fmt: skip
    assert all(r.usable and len(r.rounds) == 3 and r.model is None for r in results), [r.error for r in results]
    assert all(r.fidelity is not None and r.fidelity.max_rel_error <= 0.02 for r in results)
    order = [line for line in stream.getvalue().splitlines() if line.endswith("measuring latency")]
    first, second = (f"{c.choice.label()} {c.variant_id}" for c in candidates)
    timed = [first if first in line else second for line in order]
    assert timed == [first, second, second, first, first, second], order


def test_a_stop_between_rounds_times_nothing_more(face_package_dir: Path) -> None:
    package = open_package(face_package_dir)
    candidates = every_runnable_choice(package, look_at_box().hardware, Overrides(backend="litert"))
    stop = threading.Event()
    stop.set()
    results = measure_choices(package, candidates, hint="latency", seconds=0.1, rounds=2, stop=stop)
    assert results and all(r.rounds == [] and r.model is None for r in results)
