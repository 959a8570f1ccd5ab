"""Where pruning's speed goes: OpenVINO CPU's own per-layer times, unpruned against pruned, for each rounding.

bench/pruning.py measures what a pruned model gains end to end; this says which layers gain and which do
not. The digits ResNet of bench/pruning.py is built with random weights (speed does not depend on what
the weights are; its batch normalization is given the statistics of random inputs so that it folds like a
trained one), its channels are removed by the converter's own `prune_module` with each --round-to asked for,
and the unpruned and pruned ONNX exports are compiled by OpenVINO with per-layer counters on and a stated
precision hint. Each round runs every model in turn for --seconds / --rounds; the per-layer times are the
CPU plugin's own (time inside each layer, so time lost waiting for the cores of a shared machine falls
mostly outside them; the median of each layer's times, summed), and the ratio given is the median over
rounds of unpruned over pruned.

    python bench/pruning_layers.py [--size 32] [--round-to 8,16] [--share 0.3] [--precision f32] [--threads 1]
        [--rounds 7] [--seconds 7] [--widths 16,32,64,128]
"""

from __future__ import annotations

import argparse
import collections
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _compiled(core: Any, module: Any, example: Any, path: Path, args: argparse.Namespace) -> Any:
    import torch

    torch.onnx.export(module, (example,), str(path), opset_version=17, dynamo=False)
    config = {"PERF_COUNT": "YES", "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": args.precision}
    if args.threads:
        config["INFERENCE_NUM_THREADS"] = args.threads
    return core.compile_model(core.read_model(str(path)), "CPU", config)


def _round(request: Any, feed: np.ndarray, seconds: float) -> tuple[float, dict[str, float], str]:
    """Median latency (ms), median time per layer (µs) and the convolutions' kernel, over `seconds` of inferences.

    Medians, because on a shared machine an inference now and then is preempted inside a layer."""
    for _ in range(10):
        request.infer({0: feed})
    layers: dict[str, list[float]] = collections.defaultdict(list)
    latencies, kernels = [], set()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(latencies) < 10:
        started = time.perf_counter()
        request.infer({0: feed})
        latencies.append(time.perf_counter() - started)
        for info in request.profiling_info:
            layers[info.node_name].append(info.real_time.total_seconds() * 1e6)
            if info.node_type == "Convolution":
                kernels.add(info.exec_type)
    medians = {node: statistics.median(times) for node, times in layers.items()}
    return statistics.median(latencies) * 1e3, medians, ",".join(sorted(kernels))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--round-to", default="8,16")
    parser.add_argument("--share", type=float, default=0.3)
    parser.add_argument("--precision", default="f32", help="OpenVINO's INFERENCE_PRECISION_HINT: f32 or bf16")
    parser.add_argument("--threads", type=int, default=1, help="0: the plugin's default")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=7.0, help="per model, over all rounds")
    parser.add_argument("--widths", default="16,32,64,128")
    args = parser.parse_args()
    import openvino as ov
    import pruning
    import torch

    from converters.prune_channels import ChannelPruneOptions, prune_module

    os.environ[pruning.WIDTHS_VARIABLE] = args.widths
    os.environ[pruning.SIZE_VARIABLE] = str(args.size)
    torch.manual_seed(0)
    unpruned = pruning.build_resnet()
    unpruned.train()
    with torch.no_grad():
        for _ in range(4):
            unpruned(torch.rand(32, *pruning.input_shape()[1:]))
    unpruned.eval()
    example = torch.rand(pruning.input_shape())
    models: dict[str, Any] = {"unpruned": unpruned}
    for multiple in (int(r) for r in args.round_to.split(",")):
        pruned = copy.deepcopy(unpruned)
        summary = prune_module(pruned, example, ChannelPruneOptions(share=args.share, round_to=multiple))
        models[f"round to {multiple}"] = pruned
        widths = sorted({(layer.before, layer.after) for layer in summary["layers"] if layer.name != "head"})
        print(f"round to {multiple}: MACs {summary['macs_before']:,} -> {summary['macs_after']:,}, channels {widths}")
    core = ov.Core()
    with tempfile.TemporaryDirectory(prefix="bench-pruning-layers-") as scratch:
        requests = {
            name: _compiled(core, module, example, Path(scratch) / f"{index}.onnx", args).create_infer_request()
            for index, (name, module) in enumerate(models.items())
        }
        feed = example.numpy()
        load_before = os.getloadavg()
        latency: dict[str, list[float]] = collections.defaultdict(list)
        totals: dict[str, list[float]] = collections.defaultdict(list)
        per_layer: dict[str, list[dict[str, float]]] = collections.defaultdict(list)
        kernels: dict[str, str] = {}
        for _ in range(args.rounds):
            for name, request in requests.items():
                ms, layers, kernels[name] = _round(request, feed, args.seconds / args.rounds)
                latency[name].append(ms)
                totals[name].append(sum(layers.values()))
                per_layer[name].append(layers)
        load_after = os.getloadavg()
    print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; precision {args.precision}")
    for name in requests:
        by_latency = statistics.median(a / b for a, b in zip(latency["unpruned"], latency[name], strict=True))
        by_layers = statistics.median(a / b for a, b in zip(totals["unpruned"], totals[name], strict=True))
        print(
            f"{name:12s} latency {statistics.median(latency[name]):.3f} ms, layers "
            f"{statistics.median(totals[name]):.0f} µs; unpruned / this: {by_latency:.2f}x by latency, "
            f"{by_layers:.2f}x by layer time; {kernels[name]}"
        )
    print("convolution: µs unpruned -> " + " -> ".join(name for name in requests if name != "unpruned"))
    for node in per_layer["unpruned"][0]:
        if "Conv" not in node:
            continue
        times = [statistics.median(r.get(node, float("nan")) for r in per_layer[name]) for name in requests]
        print(f"  {node.split('/Conv')[0]:34s} " + " -> ".join(f"{t:6.1f}" for t in times))


if __name__ == "__main__":
    main()
