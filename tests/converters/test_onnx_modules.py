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


def test_batch_norm_put_back_keeps_the_function(tiny_cnn_factory: str, tmp_path: Path) -> None:
    import torch
    from tiny_cnn import INPUT_SHAPE, digits_16, make_tiny_cnn

    from converters.onnx_modules import with_batch_norm

    model = make_tiny_cnn()
    images = digits_16()[0][:256]
    model.train()
    with torch.no_grad():  # batch statistics of real images, so that the folded normalization is not an identity
        model(torch.from_numpy(images))
    model.eval()
    path = tmp_path / "tiny_cnn.onnx"
    torch.onnx.export(model, (torch.zeros(INPUT_SHAPE),), str(path), opset_version=17, dynamo=False)
    module = onnx_module(path)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in module.modules())  # folded by the export
    x = torch.from_numpy(images)
    with torch.no_grad():
        before = module(x).numpy()
    convolutions = sum(type(m) is torch.nn.Conv2d for m in module.modules())
    assert with_batch_norm(module, images) == convolutions == 6
    norms = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(norms) == convolutions
    assert all(m.bias is None for m in module.modules() if type(m) is torch.nn.Conv2d)
    with torch.no_grad():
        after = module.eval()(x).numpy()
        # In training mode each layer normalizes by the batch's own statistics; over the very images the
        # running statistics were measured on, those are the same, so the outputs barely move.
        trained = module.train()(x).numpy()
    scale = float(np.abs(before).max())
    # float32 rounding through six layers, relative to the outputs' size
    assert np.abs(after - before).max() < 1e-4 * scale
    assert np.abs(trained - before).max() < 1e-3 * scale
    # Each convolution's outputs are scaled to unit variance, as a normalized layer's inputs are (v / (v + eps):
    # at most 1, and near it for every channel whose outputs vary by more than eps).
    variances = np.concatenate([m.running_var.numpy() for m in norms if m.running_var is not None])
    assert variances.max() <= 1.0 + 1e-6 and np.median(variances) > 0.99
