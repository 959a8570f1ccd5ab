"""Preprocessing alone: a 640×480 camera frame to each daemon benchmark model's input tensor.

What the feed thread spends per frame before inference (resize, colour order, normalisation, layout),
timed with `timeit` on one core: the best of `--repeats` runs of `--number` calls, in microseconds.
A plain bilinear resize of the frame to the input size is shown beside it for scale.

    python bench/preprocess_speed.py [--number 500] [--repeats 5]
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

import cv2
from models import FACE_PACKAGE, MOBILENET_V2_INPUT, camera_frame

from edge_runtime.backends.base import TensorSpec
from edge_runtime.package.loader import open_package
from edge_runtime.package.manifest import InputSpec
from edge_runtime.pipeline.preprocess import ImagePreprocessor


def best_us(call: Callable[[], object], number: int, repeats: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=repeats)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--number", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    frame = camera_frame()
    specs: dict[str, InputSpec] = {
        "mobilenet_v2": MOBILENET_V2_INPUT,
        "face": open_package(FACE_PACKAGE).manifest.inputs[0],
    }
    print(f"command: python bench/preprocess_speed.py --number {args.number} --repeats {args.repeats}")
    print(f"frame {frame.shape[1]}×{frame.shape[0]} BGR; best of {args.repeats} × {args.number} calls\n")
    print("| model | input | preprocess µs | plain resize to the input size µs |")
    print("|---|---|---:|---:|")
    for name, spec in specs.items():
        preprocess = ImagePreprocessor(spec, TensorSpec("input", spec.shape, "float32"))
        size = (preprocess.width, preprocess.height)
        whole = best_us(lambda p=preprocess: p(frame), args.number, args.repeats)
        resize = best_us(lambda s=size: cv2.resize(frame, s, interpolation=cv2.INTER_LINEAR), args.number, args.repeats)
        print(f"| {name} | {spec.layout} {list(spec.shape)} {spec.resize} | {whole:.1f} | {resize:.1f} |")


if __name__ == "__main__":
    main()
