"""An ONNX graph rebuilt as a PyTorch module by onnx2torch, so that its channels can be pruned and fine-tuned.

onnx2torch imports torchvision at import time for two operators only (NonMaxSuppression and RoiAlign),
and torchvision is not a dependency of the converter: its wheels are built against one exact torch
release and break beside any other. When torchvision is absent, onnx2torch is imported against a
stand-in whose functions raise, and graphs that hold either operator are refused before conversion,
naming the node. Any other node onnx2torch cannot translate is refused the same way, and the rebuilt
module must reproduce ONNX Runtime's outputs on a random input before it is pruned.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import numpy as np

from converters.errors import ConversionError
from converters.sources import first_line

__all__ = ["REBUILD_TOLERANCE", "onnx_module"]

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
