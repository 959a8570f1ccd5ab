"""Our backend layer against the backends' own benchmark tools, side by side in one run.

For each model, the same device, precision, thread count and hint are given to both sides, and the
pairs are run alternately (ours, theirs, ours, theirs, ...) so that drift of the machine affects both
alike. Medians over the rounds are reported with the ratio ours/theirs (latency: lower is better,
below 1.03 meets the goal; throughput: ours/theirs above 0.97 meets it).

    python bench/backend_overhead.py [--rounds 5] [--seconds 5] [--json results.json]

Tools: OpenVINO's `benchmark_app` and `litert-benchmark`, both installed with their wheels.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from edge_runtime.measure.benchmark import bench_feed, measure_latency, measure_throughput
from edge_runtime.package.loader import open_package
from edge_runtime.placement.model import load_model

REPO = Path(__file__).resolve().parents[1]
MODELS = {
    "face_detection_short_range": REPO / "samples/models/face_detection_short_range",
    "pose_detection": REPO / "samples/models/pose_detection",
}


@dataclass
class Row:
    model: str
    comparison: str
    metric: str
    ours: list[float]
    theirs: list[float]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ours) / statistics.median(self.theirs)


def tool(name: str) -> str:
    path = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(path).exists():
        raise SystemExit(f"{name} not found; install the project with `pip install -e .[all]`")
    return path


def benchmark_app(model_file: Path, hint: str, seconds: float, precision: str = "f32") -> float:
    """Median latency in ms (latency hint) or throughput in FPS (throughput hint).

    benchmark_app refuses a thread count together with a hint, so both sides use all cores here.
    """
    command = [tool("benchmark_app"), "-m", str(model_file), "-d", "CPU", "-hint", hint]
    command += ["-t", str(max(1, round(seconds))), "-infer_precision", precision]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    if hint == "throughput":
        return float(re.search(r"Throughput:\s+([\d.]+) FPS", out).group(1))  # type: ignore[union-attr]
    value, unit = re.search(r"Median:\s+([\d.]+) (ms|us)", out).groups()  # type: ignore[union-attr]
    return float(value) / (1000 if unit == "us" else 1)


def litert_benchmark(model_file: Path, seconds: float, threads: int, expected_ms: float) -> float:
    runs = max(50, int(seconds * 1000 / max(expected_ms, 0.05)))
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        command = [tool("litert-benchmark"), "--model", str(model_file), "--num_threads", str(threads)]
        command += ["--num_runs", str(runs), "--result_json", str(result)]
        subprocess.run(command, capture_output=True, text=True, check=True)
        return float(json.loads(result.read_text())["latency"]["median_ms"])


def ours_latency(package_dir: Path, variant: str, backend: str, seconds: float, threads: int | None) -> float:
    options = {"hint": "latency"} | ({"threads": threads} if threads else {})
    model = load_model(open_package(package_dir), variant, backend, options)
    try:
        return measure_latency(model, bench_feed(model), seconds).median_ms
    finally:
        model.close()


def ours_throughput(package_dir: Path, variant: str, seconds: float) -> float:
    model = load_model(open_package(package_dir), variant, "openvino", {"hint": "throughput"})
    try:
        return measure_throughput(model, bench_feed(model), seconds).throughput_fps
    finally:
        model.close()


def alternate(rounds: int, ours: Callable[[], float], theirs: Callable[[], float]) -> tuple[list[float], list[float]]:
    a: list[float] = []
    b: list[float] = []
    for _ in range(rounds):
        a.append(ours())
        b.append(theirs())
    return a, b


def run(rounds: int, seconds: float, threads: int) -> list[Row]:
    rows = []
    for name, package_dir in MODELS.items():
        package = open_package(package_dir)
        tflite = package.source("tflite/fp32").path
        ov_variant = "openvino/fp32" if "openvino/fp32" in package.manifest.variants else "tflite/fp32"
        ov_file = package.source(ov_variant).path
        pairs = [
            (
                "OpenVINO CPU f32 vs benchmark_app",
                "median latency ms",
                partial(ours_latency, package_dir, ov_variant, "openvino", seconds, None),
                partial(benchmark_app, ov_file, "latency", seconds),
            ),
            (
                "OpenVINO CPU f32 vs benchmark_app",
                "throughput FPS",
                partial(ours_throughput, package_dir, ov_variant, seconds),
                partial(benchmark_app, ov_file, "throughput", seconds),
            ),
        ]
        for comparison, metric, ours, theirs in pairs:
            print(f"{name}: {comparison}, {metric}", file=sys.stderr)
            rows.append(Row(name, comparison, metric, *alternate(rounds, ours, theirs)))
        print(f"{name}: LiteRT XNNPACK vs litert-benchmark", file=sys.stderr)
        ours_ms: list[float] = []
        theirs_ms: list[float] = []
        for _ in range(rounds):
            ours_ms.append(ours_latency(package_dir, "tflite/fp32", "litert", seconds, threads))
            theirs_ms.append(litert_benchmark(tflite, seconds, threads, ours_ms[-1]))
        rows.append(Row(name, "LiteRT XNNPACK vs litert-benchmark", "median latency ms", ours_ms, theirs_ms))
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| model | comparison | metric | ours (median) | theirs (median) | ours/theirs |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.model} | {row.comparison} | {row.metric} | {statistics.median(row.ours):.3f} "
            f"| {statistics.median(row.theirs):.3f} | {row.ratio:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = run(args.rounds, args.seconds, args.threads)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"ratio": r.ratio} for r in rows], indent=2))


if __name__ == "__main__":
    main()
