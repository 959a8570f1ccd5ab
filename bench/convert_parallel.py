"""Would building int8 variants side by side pay? Two quantizations one after the other against two at once.

Each quantization is what `edge-convert` does for openvino/int8 (`converters.openvino_variants.quantize_int8`,
300 calibration images, the face landmark model of bench/convert_time.py), in a process of its own, Python's
start and the model's conversion to OpenVINO included. A round times two in a row, then two side by side,
in the opposite order every other round, so that drift of a shared machine affects both alike; medians over
the rounds. A ratio above 1 means side by side pays.

    python bench/convert_parallel.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

from int8_recovery import MODELS, calibration, model_file  # noqa: E402

QUANTIZE = """
import sys
from pathlib import Path
from converters.calibration import load_calibration
from converters.context import BuildContext, QuantizationSettings
from converters.describe import InputFlags, build_input_specs, model_tensors
from converters.openvino_variants import quantize_int8
from converters.progress import Warnings
from converters.sources import SourceKind, SourceModel
from edge_runtime.package.manifest import Task

model, images, out = (Path(arg) for arg in sys.argv[1:4])
source = SourceModel(model, SourceKind.TFLITE)
tensors, _ = model_tensors(source)
specs = build_input_specs(tensors, None, InputFlags(color_order="RGB", mean=(0.0,), std=(255.0,)), {})
samples = load_calibration(images, specs, [t.name for t in tensors], 300, 0, Warnings())
quantize_int8(BuildContext(source, out, samples, None, Task.KEYPOINTS, QuantizationSettings()), None)
"""


def quantizations(count: int, side_by_side: bool, model: Path, images: Path, scratch: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    command = [sys.executable, "-c", QUANTIZE, str(model), str(images)]
    if side_by_side:
        running = [subprocess.Popen([*command, str(scratch / f"p{i}")], env=env) for i in range(count)]
        if any(process.wait() != 0 for process in running):
            raise RuntimeError("a quantization failed")
    else:
        for i in range(count):
            subprocess.run([*command, str(scratch / f"s{i}")], env=env, check=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    _, size = MODELS["face_landmark"]
    model, images = model_file("face_landmark"), calibration(size, 0)
    times: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(args.rounds):
            for side_by_side in (False, True) if index % 2 == 0 else (True, False):
                times[side_by_side].append(quantizations(2, side_by_side, model, images, Path(scratch)))
                print(
                    f"round {index + 1}: side by side {side_by_side}: {times[side_by_side][-1]:.1f} s", file=sys.stderr
                )
    one_after, at_once = statistics.median(times[False]), statistics.median(times[True])
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"two in a row {one_after:.1f} s, two side by side {at_once:.1f} s: side by side {one_after / at_once:.2f}x")


if __name__ == "__main__":
    main()
