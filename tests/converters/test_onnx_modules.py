"""ONNX graphs rebuilt as PyTorch modules, and the graphs refused with the node that cannot be rebuilt."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from converters.errors import ConversionError
from converters.onnx_modules import onnx_module


def _graph(path: Path, op_type: str, inputs: list[str], output_type: str = "FLOAT") -> Path:
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node(op_type, inputs, ["y"], name="odd")]
    initializers = [helper.make_tensor(name, TensorProto.INT64, [1], [5]) for name in inputs if name == "limit"]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4])],
        [helper.make_tensor_value_info("y", getattr(TensorProto, output_type), None)],
        initializer=initializers,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_plain_graph_is_rebuilt_and_agrees(tmp_path: Path) -> None:
    import onnxruntime as ort
    import torch

    path = _graph(tmp_path / "softmax.onnx", "Softmax", ["r"])
    module = onnx_module(path)
    x = np.random.default_rng(0).standard_normal((1, 4, 4)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.allclose(module(torch.from_numpy(x)).detach().numpy(), want, atol=1e-6)


def test_node_without_a_converter_is_named(tmp_path: Path) -> None:
    path = _graph(tmp_path / "hardmax.onnx", "Hardmax", ["r"])
    with pytest.raises(
        ConversionError, match=r"cannot rebuild node odd \(Hardmax at opset 17\).*package.module:factory"
    ):
        onnx_module(path)


def test_suppression_needs_torchvision_and_is_named(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed here, so onnx2torch rebuilds NonMaxSuppression")
    path = _graph(tmp_path / "nms.onnx", "NonMaxSuppression", ["r", "r", "limit"], output_type="INT64")
    with pytest.raises(ConversionError, match=r"node odd \(NonMaxSuppression at opset 17\)"):
        onnx_module(path)
