"""An ONNX graph rebuilt as a PyTorch module by onnx2torch, so that its channels can be pruned and fine-tuned.

onnx2torch imports torchvision at import time for two operators only (NonMaxSuppression and RoiAlign),
and torchvision is not a dependency of the converter: its wheels are built against one exact torch
release and break beside any other. When torchvision is absent, onnx2torch is imported against a
stand-in whose functions raise, and graphs that hold either operator are refused before conversion,
naming the node. Any other node onnx2torch cannot translate is refused the same way, and the rebuilt
module must reproduce ONNX Runtime's outputs on a random input before it is pruned.

An exported graph has its batch normalization folded into the convolutions (PyTorch's exporter does it in
eval mode, and ONNX Runtime's basic optimizations do it otherwise), so the rebuilt module is a network
without normalization. Fine-tuned as it is, it recovers less from pruning than the same network with its
batch normalization: a pruned layer's outputs have new statistics, which batch normalization re-learns
while a bare bias cannot. `with_batch_norm` puts a batch normalization back behind each convolution, its
statistics measured on the calibration images, so that the module computes the same function in eval
mode and is distilled like the model it was exported from. (Which channels go does not depend on it:
`converters.channel_importance` ranks them on the folded weights, which the file holds as they were.)
"""

from __future__ import annotations

import copy
import importlib.util
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import numpy as np

from converters.errors import ConversionError
from converters.sources import first_line

__all__ = ["REBUILD_TOLERANCE", "onnx_module", "with_batch_norm"]

NEEDS_TORCHVISION = frozenset({"NonMaxSuppression", "RoiAlign"})
REBUILD_TOLERANCE = 1e-3  # as for the converter's own exports (converters.pytorch_source.EXPORT_TOLERANCE)
ASK_FOR_FACTORY = "give the PyTorch code that builds the model as package.module:factory instead"


def onnx_module(path: Path) -> Any:
    """The ONNX model at `path` as an `nn.Module` that computes what ONNX Runtime computes."""

    model = _folded(path)
    node = _first_unsupported(model)
    if node is not None:
        opset = next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), "?")
        raise ConversionError(
            f"{path}: onnx2torch cannot rebuild node {node.name or '(unnamed)'} ({node.op_type} at opset {opset}) as "
            f"a PyTorch module, so its channels cannot be pruned; {ASK_FOR_FACTORY} (or export at opset 17)"
        )
    convert = _onnx2torch_convert()
    try:
        module = convert(model).eval()
    except Exception as error:
        raise ConversionError(
            f"{path}: onnx2torch cannot rebuild the graph: {first_line(error)}; {ASK_FOR_FACTORY}"
        ) from None
    _check_rebuilt(module, path)
    return module


def _folded(path: Path) -> Any:
    """The graph after ONNX Runtime's basic optimizations, which keep standard operators: constants folded into
    initializers and batch normalization fused into the convolution before it, as onnx2torch needs to build
    plain layers (a batch normalization whose statistics are computed nodes becomes a function no pruner sees)."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="edge-convert-onnx2torch-") as scratch:
        folded = Path(scratch) / "folded.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        try:
            ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as error:
            raise ConversionError(f"ONNX Runtime cannot read {path}: {first_line(error)}") from None
        return onnx.load(str(folded))


def _first_unsupported(model: Any) -> Any:
    """The first node onnx2torch has no converter for at the graph's opset, or that needs an absent torchvision."""
    _onnx2torch_convert()  # registers the node converters
    from onnx2torch.node_converters import get_converter

    opset = {entry.domain or "ai.onnx": entry.version for entry in model.opset_import}
    has_torchvision = importlib.util.find_spec("torchvision") is not None
    for node in model.graph.node:
        domain = node.domain or "ai.onnx"
        if node.op_type in NEEDS_TORCHVISION and not has_torchvision:
            return node
        try:
            get_converter(node.op_type, opset.get(domain, 1), node.domain or "")
        except NotImplementedError:
            return node
    return None


def _onnx2torch_convert() -> Any:
    """onnx2torch.convert, imported against a torchvision stand-in where torchvision is not installed."""
    if importlib.util.find_spec("onnx2torch") is None:
        raise ConversionError(
            "--prune-channels on an ONNX file needs onnx2torch: pip install --no-deps 'onnx2torch==1.5.15' (its "
            f"declared torchvision is needed only for NonMaxSuppression and RoiAlign); or {ASK_FOR_FACTORY}"
        )
    if "onnx2torch" in sys.modules or importlib.util.find_spec("torchvision") is not None:
        from onnx2torch import convert

        return convert
    stand_in = types.ModuleType("torchvision")
    ops = types.ModuleType("torchvision.ops")
    for name in ("nms", "box_convert", "roi_align", "batched_nms"):
        setattr(ops, name, _needs_torchvision)
    stand_in.ops = ops  # type: ignore[attr-defined]
    sys.modules.update({"torchvision": stand_in, "torchvision.ops": ops})
    try:
        from onnx2torch import convert
    finally:
        sys.modules.pop("torchvision", None)
        sys.modules.pop("torchvision.ops", None)
    return convert


def _needs_torchvision(*args: Any, **kwargs: Any) -> Any:
    raise ConversionError(f"this graph's NonMaxSuppression or RoiAlign needs torchvision; {ASK_FOR_FACTORY}")


def _check_rebuilt(module: Any, path: Path) -> None:
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise ConversionError(f"{path}: --prune-channels takes models with one input (this one has {len(inputs)})")
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in inputs[0].shape]
    example = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = session.run(None, {inputs[0].name: example})[0]
    with torch.no_grad():
        got = module(torch.from_numpy(example))
    got = got[0] if isinstance(got, (tuple, list)) else got
    difference = float(np.max(np.abs(got.numpy() - want))) if want.size else 0.0
    if difference > REBUILD_TOLERANCE:
        raise ConversionError(
            f"{path}: the module onnx2torch rebuilt differs from ONNX Runtime by up to {difference:.3g} (over "
            f"{REBUILD_TOLERANCE:g}); {ASK_FOR_FACTORY}"
        )


def with_batch_norm(module: Any, images: np.ndarray, batch_size: int = 64, eps: float = 1e-5) -> int:
    """Put a batch normalization back behind each 2-D convolution of `module`, in place; how many were put back.

    Each convolution's outputs (before its bias) are measured over `images`: per channel, mean m and variance
    v. The convolution loses its bias and has each output channel's weights divided by s = sqrt(v + eps), so
    its outputs have unit variance as a normalized layer's inputs would; the batch normalization after it
    holds the running mean m / s and variance v / s^2, and the scale and shift that give back exactly the
    convolution's former outputs. In eval mode nothing changes; in training mode the layer normalizes by
    each batch's statistics, as the layer that was folded did."""
    import torch

    convolutions = [(name, m) for name, m in module.named_modules() if type(m) is torch.nn.Conv2d]
    if not convolutions or len(images) == 0:
        return 0
    sums: dict[str, list[Any]] = {}

    def record(name: str) -> Any:
        def hook(layer: Any, _: Any, output: Any) -> None:
            z = output.double()
            if layer.bias is not None:
                z = z - layer.bias.double().view(1, -1, 1, 1)
            count, total, squares = sums.get(name, [0, 0.0, 0.0])
            sums[name] = [
                count + z.shape[0] * z.shape[2] * z.shape[3],
                total + z.sum((0, 2, 3)),
                squares + (z * z).sum((0, 2, 3)),
            ]

        return hook

    hooks = [layer.register_forward_hook(record(name)) for name, layer in convolutions]
    module.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(images), batch_size):
                module(torch.from_numpy(np.ascontiguousarray(images[start : start + batch_size], np.float32)))
    finally:
        for hook in hooks:
            hook.remove()
    for name, conv in convolutions:
        if name not in sums:  # not on the path the images took
            continue
        count, total, squares = sums[name]
        mean = total / count
        variance = (squares / count - mean * mean).clamp_min(0.0)
        scale = torch.sqrt(variance + eps)
        bare = copy.deepcopy(conv)  # stride, padding, groups and all, less the bias the normalization takes over
        bare.register_parameter("bias", None)
        norm = torch.nn.BatchNorm2d(conv.out_channels, eps=eps)
        running_mean, running_var = norm.running_mean, norm.running_var
        assert running_mean is not None and running_var is not None  # tracked by default
        bias = conv.bias.double() if conv.bias is not None else torch.zeros_like(mean)
        with torch.no_grad():
            bare.weight.copy_(conv.weight.double() / scale.view(-1, 1, 1, 1))
            running_mean.copy_(mean / scale)
            running_var.copy_(variance / scale**2)
            norm.weight.copy_(scale * torch.sqrt(variance / scale**2 + eps))
            norm.bias.copy_(bias + mean)
        parent, _, attribute = name.rpartition(".")
        setattr(module.get_submodule(parent) if parent else module, attribute, torch.nn.Sequential(bare, norm))
    return len(sums)
