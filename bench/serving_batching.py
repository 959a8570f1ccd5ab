"""Do batches pay on this box? Batches of requests against single requests kept in flight, per backend.

Serving joins requests into batches only where a measurement on the box says batches beat single
requests by `BATCH_MARGIN` (see `edge_runtime.serving.batch_choice`). This bench makes the same
measurement, with more rounds, for the models and backends a box is likely to serve, so that the
default can be judged: each model is loaded as serving loads it (`dynamic_batch`, the throughput hint
of an unpaced source), then `measure_throughputs` alternates single requests and batches of each size
through the model's own async runner, kept full, and reports samples per second with the median of
the rounds.

- MobileNetV2 1.0 at 224×224, fp32 (bench/models.py, seeded random weights): OpenVINO CPU and ONNX
  Runtime CPU, both from the same ONNX graph exported with a batch of one.
- MediaPipe's BlazeFace short-range detector (samples/models/face_detection_short_range): its
  openvino/fp32 and tflite/fp32 variants, on OpenVINO CPU and LiteRT's XNNPACK.

    python bench/serving_batching.py [--sizes 4 8] [--rounds 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from dataclasses import asdict
from pathlib import Path

import onnx
from models import FACE_PACKAGE, MOBILENET_V2_INPUT, mobilenet_v2

from edge_runtime.backends.host import cpu_name
from edge_runtime.package.loader import open_package
from edge_runtime.package.manifest import DecoderSpec, ModelFormat, Precision, Task
from edge_runtime.package.writer import describe_variant, write_package
from edge_runtime.placement.model import load_model
from edge_runtime.serving.batch_choice import BATCH_MARGIN, batch_problem, measure_throughputs

SIDES = (  # (model, variant, backend)
    ("mobilenet_v2", "openvino/fp32", "openvino"),
    ("mobilenet_v2", "onnx/fp32", "onnxruntime"),
    ("face", "openvino/fp32", "openvino"),
    ("face", "tflite/fp32", "litert"),
)


def mobilenet_package(root: Path) -> Path:
    """MobileNetV2 as onnx/fp32 and openvino/fp32 variants of one package, both with a batch of one."""
    from openvino import convert_model, save_model

    model, _ = mobilenet_v2()
    (root / "onnx/fp32").mkdir(parents=True)
    (root / "openvino/fp32").mkdir(parents=True)
    onnx.save(model, root / "onnx/fp32/model.onnx")
    save_model(convert_model(root / "onnx/fp32/model.onnx"), root / "openvino/fp32/model.xml", compress_to_fp16=False)
    variants = {
        "onnx/fp32": describe_variant(root, ["onnx/fp32/model.onnx"], ModelFormat.ONNX, Precision.FP32),
        "openvino/fp32": describe_variant(
            root, ["openvino/fp32/model.xml", "openvino/fp32/model.bin"], ModelFormat.OPENVINO, Precision.FP32
        ),
    }
    write_package(
        root,
        variants,
        name="mobilenet_v2_random",
        task=Task.CLASSIFICATION,
        inputs=(MOBILENET_V2_INPUT,),
        output_names=("logits",),
        decoder=DecoderSpec(name="classification", params={"top_k": 5}),
    )
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8], help="batch sizes to measure")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per side, singles and batches alternating")
    parser.add_argument("--seconds", type=float, default=1.0, help="least time per phase of a round")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        packages = {"mobilenet_v2": mobilenet_package(Path(scratch) / "mobilenet_v2"), "face": FACE_PACKAGE}
        for name, variant, backend in SIDES:
            options = {"dynamic_batch": True, "hint": "throughput"}
            model = load_model(open_package(packages[name]), variant, backend, options)
            try:
                problem = batch_problem(model)
                for size in args.sizes:
                    if problem is not None:
                        rows.append({"model": name, "backend": backend, "batch": size, "problem": problem})
                        continue
                    measured = measure_throughputs(model, size, args.rounds, args.seconds)
                    rows.append({"model": name, "backend": backend, "batch": size, **asdict(measured),
                                 "ratio": measured.ratio, "chosen": measured.ratio >= BATCH_MARGIN})  # fmt: skip
            finally:
                model.close()
    print(f"{cpu_name()} ({platform.machine()}), {args.rounds} rounds, median samples/s")
    print(f"{'model':<14}{'backend':<13}{'batch':>6}{'batches/s':>11}{'singles/s':>11}{'ratio':>8}  chosen")
    for row in rows:
        if "problem" in row:
            print(f"{row['model']:<14}{row['backend']:<13}{row['batch']:>6}  not batchable: {row['problem']}")
            continue
        print(
            f"{row['model']:<14}{row['backend']:<13}{row['batch']:>6}{row['batched']:>11.1f}{row['single']:>11.1f}"
            f"{row['ratio']:>8.2f}  {'batches' if row['chosen'] else 'side by side'}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"cpu": cpu_name(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
