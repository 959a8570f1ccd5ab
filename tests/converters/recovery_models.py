"""Two small regression models (no labels) where NNCF's default int8 really loses too much.

- `offset`: the hidden layer's outputs sit around 20 with a spread of about 1, so the head's weight rounding
  shifts its outputs by far more than twice its small biases; fast bias correction leaves such shifts alone,
  full bias correction removes them.
- `outlier`: one hidden channel is 300 times larger than the others (the head reads it with a 300 times smaller
  weight), so the head's per-tensor activation quantizer rounds the other channels away whatever the preset
  or bias correction; only keeping the head in float restores it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from converters.pipeline import ConvertOptions, convert
from converters.report import ConversionReport

__all__ = ["SAMPLES", "WIDTH", "offset_model", "outlier_model", "write_models"]

WIDTH = 64
SAMPLES = 64


def _mlp(path: Path, weights: dict[str, np.ndarray]) -> Path:
    """x [1, 64] -> Gemm `hidden` -> Gemm `head`, OpenVINO's MatMul ops `hidden/WithoutBiases` and `head/...`."""
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="hidden"),
        helper.make_node("Gemm", ["h", "w2", "b2"], ["y"], name="head"),
    ]
    graph = helper.make_graph(
        nodes,
        path.stem,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, weights["w2"].shape[1]])],
        initializer=[numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def offset_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    head = rng.normal(0, 1, (WIDTH, 8))
    head -= head.mean(axis=0)  # the offset cancels in float, not once the weights are rounded
    return _mlp(
        path,
        {
            "w1": rng.normal(0, 0.25, (WIDTH, WIDTH)),
            "b1": np.full(WIDTH, 20.0),
            "w2": head,
            "b2": np.sign(rng.normal(0, 1, 8)) * 0.1,
        },
    )


def outlier_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    hidden = rng.normal(0, 1 / np.sqrt(WIDTH), (WIDTH, WIDTH))
    hidden[:, 0] *= 300
    b1 = rng.normal(0, 0.1, WIDTH)
    head = rng.normal(0, 1 / np.sqrt(WIDTH), (WIDTH, 16))
    head[0] /= 300
    return _mlp(path, {"w1": hidden, "b1": b1, "w2": head, "b2": rng.normal(0, 0.1, 16)})


def write_models(folder: Path) -> Path:
    """Both models and their calibration inputs (`calibration.npy`) in `folder`."""
    offset_model(folder / "offset.onnx")
    outlier_model(folder / "outlier.onnx")
    np.save(folder / "calibration.npy", np.random.default_rng(1).uniform(-1, 1, (SAMPLES, WIDTH)).astype(np.float32))
    return folder


def convert_int8(models: Path, name: str, out_dir: Path, threshold: float = 1.0, **options: Any) -> ConversionReport:
    """Model `name` of `models` converted to openvino/int8 alone, on the folder's calibration data, timed briefly;
    `options` go to ConvertOptions as they are (`recover`, `cache_dir`)."""
    return convert(
        ConvertOptions(
            model=models / f"{name}.onnx",
            out_dir=out_dir,
            calibration=models / "calibration.npy",
            variants=("openvino/int8",),
            drop_threshold=threshold,
            bench_seconds=0.05,
            **options,
        )
    )
