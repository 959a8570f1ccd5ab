"""INT8 against FP32 for a MobileNetV2-sized classifier, on OpenVINO CPU and LiteRT XNNPACK, in one run.

The goal: int8 variants at least 2× as fast as fp32 on a CPU with 8-bit dot-product instructions (VNNI).

The model is Keras's MobileNetV2 (224×224, 1000 classes) with seeded random weights, converted by
`edge-convert` into openvino/fp32, openvino/int8 (NNCF), tflite/fp32 and tflite/int8 (full integer);
see quantized_package.py. The package is kept in bench/.cache/, so later runs measure without converting.

Every variant runs through the runtime's own backends and `edge_runtime.measure.benchmark`, as `edge-runtime
bench` does: synchronous latency under the latency hint, asynchronous throughput under the throughput
hint. FP32 and INT8 alternate within every round, in reversed order every other round, so that drift of
a shared machine affects both alike; medians over the rounds are reported. OpenVINO's float precision
is stated, f32 for both variants: left alone, the CPU plugin runs fp32 models in bf16 on CPUs with
AVX512-BF16 or AMX, which is not the fp32 being compared (`--bf16` adds that row). LiteRT runs both
variants with the same thread count. OpenVINO's `benchmark_app` and `litert-benchmark` run the same
files in the same rounds as a cross-check.

    python bench/quantized_speed.py [--rounds 5] [--seconds 3] [--threads N] [--bf16] [--no-tools] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge_runtime.backends.host import cpu_name
from edge_runtime.measure.benchmark import bench_feed, measure_latency, measure_throughput
from edge_runtime.package.loader import open_package
from edge_runtime.placement.model import load_model

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from backend_overhead import benchmark_app, litert_benchmark  # noqa: E402
from quantized_package import VARIANTS, converted_package, describe_calibration, version  # noqa: E402

GOAL = 2.0
_COMPUTE_LAYERS = frozenset({"Convolution", "GroupConvolution", "FullyConnected", "MatMul", "Deconvolution"})


@dataclass(frozen=True)
class Setup:
    """One way of running one variant: what the table calls a row."""

    backend: str
    variant: str
    precision: str  # OpenVINO: the precision asked of the plugin; LiteRT: the variant's
    tool_precision: str = "f32"  # benchmark_app's -infer_precision

    @property
    def name(self) -> str:
        return "OpenVINO CPU" if self.backend == "openvino" else "LiteRT XNNPACK"


@dataclass
class Series:
    setup: Setup
    latency_ms: list[float] = field(default_factory=list)
    throughput_fps: list[float] = field(default_factory=list)
    tool_latency_ms: list[float] = field(default_factory=list)
    tool_fps: list[float] = field(default_factory=list)
    runs_at: str = ""


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# --- measuring -----------------------------------------------------------------------------------------


def ours(package: Path, setup: Setup, hint: str, seconds: float, threads: int) -> tuple[float, str]:
    """Median latency (ms) or throughput (FPS) through the runtime, and the precision it reports running at."""
    options: dict[str, Any] = {"hint": hint, "precision": setup.precision}
    if setup.backend == "litert":
        options = {"hint": hint, "threads": threads}
    return measured(package, setup.variant, setup.backend, options, hint, seconds)


def measured(
    package: Path, variant: str, backend: str, options: dict[str, Any], hint: str, seconds: float
) -> tuple[float, str]:
    """One variant loaded with `options`: median latency (ms) under the latency hint, else throughput (FPS)."""
    model = load_model(open_package(package), variant, backend, options)
    try:
        feed = bench_feed(model)
        if hint == "latency":
            value = measure_latency(model, feed, seconds).median_ms
        else:
            value = measure_throughput(model, feed, seconds).throughput_fps
        return value, runs_at(model.backend.runs_on.precision, model.backend.runs_on.details)
    finally:
        model.close()


def runs_at(precision: str, details: dict[str, str]) -> str:
    if "float_precision" in details:
        return f"{precision}, float ops {details['float_precision']}"
    if "quantized_ops" in details:
        return f"{precision} (quantized ops {details['quantized_ops']})"
    return precision


def measure(package: Path, setups: list[Setup], args: argparse.Namespace) -> list[Series]:
    series = [Series(setup) for setup in setups]
    for round_index in range(args.rounds):
        order = series if round_index % 2 == 0 else series[::-1]
        for hint in ("latency", "throughput"):
            for item in order:
                print(f"round {round_index + 1}/{args.rounds}: {item.setup.variant} {hint}", file=sys.stderr)
                value, item.runs_at = ours(package, item.setup, hint, args.seconds, args.threads)
                (item.latency_ms if hint == "latency" else item.throughput_fps).append(value)
        if args.tools:
            for item in order:
                measure_tools(package, item, args)
    return series


def measure_tools(package: Path, item: Series, args: argparse.Namespace) -> None:
    setup = item.setup
    model_file = open_package(package).source(setup.variant).path
    print(f"  {setup.variant} with the backend's own benchmark tool", file=sys.stderr)
    if setup.backend == "openvino":
        item.tool_latency_ms.append(benchmark_app(model_file, "latency", args.seconds, setup.tool_precision))
        item.tool_fps.append(benchmark_app(model_file, "throughput", args.seconds, setup.tool_precision))
    else:
        item.tool_latency_ms.append(litert_benchmark(model_file, args.seconds, args.threads, item.latency_ms[-1]))


# --- what really runs in 8 bit ---------------------------------------------------------------------------


def openvino_layers(model_file: Path) -> str:
    """Compute layers of the compiled CPU graph by the precision (runtimePrecision) and kernel they execute with."""
    import openvino as ov

    compiled = ov.Core().compile_model(str(model_file), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    counts: Counter[str] = Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if "layerType" in info and str(info["layerType"].astype(str)) in _COMPUTE_LAYERS:
            kernel = info["primitiveType"].astype(str) if "primitiveType" in info else "?"
            counts[f"{info['layerType'].astype(str)} {info['runtimePrecision'].astype(str)} ({kernel})"] += 1
    return ", ".join(f"{count} {name}" for name, count in sorted(counts.items()))


def tflite_execution(model_file: Path, threads: int) -> str:
    """Tensor types, and which ops XNNPACK took: a full-integer model has no float tensors at all.

    LiteRT lists every original op and, after them, one DELEGATE node per XNNPACK partition, whose
    inputs are what the partition reads from outside; the ops between them are what XNNPACK runs.
    """
    from edge_runtime.backends.litert.interpreter import interpreter_library

    interpreter = interpreter_library().create(None, threads, True, model_path=str(model_file))
    interpreter.allocate_tensors()
    types = Counter(np.dtype(detail["dtype"]).name for detail in interpreter.get_tensor_details())
    found = ", ".join(f"{count} {name}" for name, count in sorted(types.items())) + " tensors"
    try:
        ops = interpreter._get_ops_details()
    except AttributeError:
        return found
    partitions = [op for op in ops if op["op_name"] == "DELEGATE"]
    builtin = [op for op in ops if op["op_name"] != "DELEGATE"]
    producer = {int(tensor): op["index"] for op in builtin for tensor in op["outputs"]}
    delegated: set[int] = set()
    for partition in partitions:
        boundary = {int(tensor) for tensor in partition["inputs"]}
        pending = [int(tensor) for tensor in partition["outputs"]]
        while pending:
            tensor = pending.pop()
            if tensor in boundary or tensor not in producer or producer[tensor] in delegated:
                continue
            delegated.add(producer[tensor])
            pending += [int(t) for t in ops[producer[tensor]]["inputs"]]
    kept = sorted({op["op_name"] for op in builtin if op["index"] not in delegated})
    found += f"; XNNPACK runs {len(delegated)} of {len(builtin)} ops in {len(partitions)} partition(s)"
    return found + (f", LiteRT's built-in kernels run {', '.join(kept)}" if kept else "")


def int8_checks(package: Path, threads: int) -> dict[str, str]:
    opened = open_package(package)
    checks = {}
    for variant in VARIANTS:
        path = opened.source(variant).path
        checks[variant] = openvino_layers(path) if variant.startswith("openvino") else tflite_execution(path, threads)
    return checks


# --- the report ----------------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def times(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def speedup(fast: list[float], slow: list[float], lower_is_better: bool) -> float | None:
    a, b = median(fast), median(slow)
    if a is None or b is None:
        return None
    return b / a if lower_is_better else a / b


def speedups(series: list[Series]) -> list[dict[str, Any]]:
    """INT8 over each float row of the same backend: latency ratio fp/int8, throughput ratio int8/fp."""
    rows = []
    for quantized in (s for s in series if s.setup.variant.endswith("int8")):
        for floating in (s for s in series if s.setup.backend == quantized.setup.backend and s is not quantized):
            rows.append(
                {
                    "backend": quantized.setup.name,
                    "comparison": f"{quantized.setup.variant} vs {floating.setup.variant} at {floating.runs_at}",
                    "latency": speedup(quantized.latency_ms, floating.latency_ms, lower_is_better=True),
                    "throughput": speedup(quantized.throughput_fps, floating.throughput_fps, lower_is_better=False),
                    "tool_latency": speedup(quantized.tool_latency_ms, floating.tool_latency_ms, lower_is_better=True),
                    "tool_throughput": speedup(quantized.tool_fps, floating.tool_fps, lower_is_better=False),
                }
            )
    return rows


def report(series: list[Series], checks: dict[str, str], context: dict[str, str]) -> str:
    lines = [f"{key}: {value}  " for key, value in context.items()]
    lines += [
        "",
        "| backend | variant | runs at | sync latency, median ms | async throughput, FPS "
        "| `benchmark_app` / `litert-benchmark` latency ms | `benchmark_app` FPS |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for item in series:
        setup = item.setup
        lines.append(
            f"| {setup.name} | {setup.variant} | {item.runs_at} | {fmt(median(item.latency_ms))} "
            f"| {fmt(median(item.throughput_fps), 1)} | {fmt(median(item.tool_latency_ms))} "
            f"| {fmt(median(item.tool_fps), 1)} |"
        )
    lines += [
        "",
        f"| backend | INT8 against | latency speedup | throughput speedup | tools' latency / FPS speedup "
        f"| ≥ {GOAL:g}× |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row in speedups(series):
        met = all(value is None or value >= GOAL for value in (row["latency"], row["throughput"]))
        tools = f"{times(row['tool_latency'])} / {times(row['tool_throughput'])}"
        lines.append(
            f"| {row['backend']} | {row['comparison'].split(' vs ')[1]} | {times(row['latency'])} "
            f"| {times(row['throughput'])} | {tools} | {'yes' if met else 'no'} |"
        )
    lines += ["", "What runs in 8 bit (OpenVINO: compiled CPU graph's compute layers; LiteRT: tensors and ops):", ""]
    lines += [f"- {variant}: {found}" for variant, found in checks.items()]
    return "\n".join(lines)


def describe_run(args: argparse.Namespace) -> dict[str, str]:
    flags = sorted(
        flag
        for flag in ("avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")
        if flag in Path("/proc/cpuinfo").read_text()
    )
    lite = version("ai-edge-litert", "tflite-runtime", "tensorflow-cpu", "tensorflow")
    return {
        "Command": "`" + shlex.join(["python", f"bench/{Path(__file__).name}", *sys.argv[1:]]) + "`",
        "Model": f"Keras MobileNetV2 224×224, 1000 classes, seeded random weights (seed {args.seed}), by edge-convert",
        "Calibration": describe_calibration(args.calibration),
        "CPU": f"{cpu_name()}, {len(os.sched_getaffinity(0))} cores, {', '.join(flags) or 'no VNNI/BF16/AMX'}",
        "Versions": f"OpenVINO {version('openvino')}, NNCF {version('nncf')}, LiteRT {lite}",
        "Settings": f"{args.rounds} rounds × {args.seconds:g} s per measurement, medians; LiteRT {args.threads} "
        "threads; OpenVINO on all cores with the latency hint (latency) and the throughput hint (FPS)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per latency or throughput measurement")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="LiteRT threads")
    parser.add_argument("--bf16", action="store_true", help="also run openvino/fp32 at bf16, the CPU plugin's default")
    parser.add_argument("--no-tools", dest="tools", action="store_false", help="skip benchmark_app/litert-benchmark")
    parser.add_argument("--calibration", choices=["photos", "noise"], default="photos")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reconvert", action="store_true", help="convert again instead of using the cached package")
    parser.add_argument("--json", type=Path, help="also write every measurement to this file")
    args = parser.parse_args()
    if args.rounds < 1 or args.seconds <= 0 or args.threads < 1:
        parser.error("--rounds, --seconds and --threads must be positive")
    package = converted_package(args.seed, args.calibration, args.reconvert)
    setups = [Setup("openvino", "openvino/fp32", "fp32"), Setup("openvino", "openvino/int8", "int8")]
    if args.bf16:
        setups.append(Setup("openvino", "openvino/fp32", "bf16", tool_precision="bf16"))
    setups += [Setup("litert", "tflite/fp32", "fp32"), Setup("litert", "tflite/int8", "int8")]
    series = measure(package, setups, args)
    checks = int8_checks(package, args.threads)
    context = describe_run(args)
    print(report(series, checks, context))
    if args.json:
        results = {"context": context, "package": str(package), "series": [asdict(s) for s in series]}
        results |= {"speedups": speedups(series), "int8_checks": checks}
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
