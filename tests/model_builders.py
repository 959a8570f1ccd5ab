"""Small real models for tests, built with the real toolchains (onnx, OpenVINO's converter)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build_tiny_classifier_onnx(path: Path, seed: int = 0, batch: int | str = 1) -> Path:
    """A 3x32x32 -> 10-class CNN (conv, relu, pool, gemm, softmax) with fixed random weights."""
    rng = np.random.default_rng(seed)
    weights = {
        "conv_w": rng.normal(0, 0.2, (8, 3, 3, 3)).astype(np.float32),
        "conv_b": rng.normal(0, 0.1, (8,)).astype(np.float32),
        "fc_w": rng.normal(0, 0.3, (10, 8)).astype(np.float32),
        "fc_b": rng.normal(0, 0.1, (10,)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_classifier",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, 32, 32])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [batch, 10])],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def convert_to_openvino_ir(source: Path, xml_path: Path) -> Path:
    import openvino as ov

    ov.save_model(ov.convert_model(source), xml_path, compress_to_fp16=False)
    return xml_path


def build_window_mean_onnx(path: Path, length: int, channels: int) -> Path:
    """A sequence model over sensor windows [1, length, channels] (NTC): the mean of each channel."""
    nodes = [helper.make_node("ReduceMean", ["window", "axes"], ["mean"], keepdims=0)]
    graph = helper.make_graph(
        nodes,
        "window_mean",
        [helper.make_tensor_value_info("window", TensorProto.FLOAT, [1, length, channels])],
        [helper.make_tensor_value_info("mean", TensorProto.FLOAT, [1, channels])],
        initializer=[numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path
