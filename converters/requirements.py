"""The optional Python modules a conversion needs, checked before it starts.

The converter imports its toolchains where it uses them, so that converting an ONNX model does not need
TensorFlow. A module that is missing then only shows when the conversion reaches it: after minutes of
work, with a partial package written (the report's chart, drawn last, needs matplotlib). So what the
requested variants, the source's format and the report need is looked up first, with find_spec, which
imports nothing, and every missing module is named at once with the pip extra that installs it.

Where a missing module only costs one variant and the report says why (tf2onnx for the ONNX variants of a
TensorFlow model, the Edge TPU compiler), the conversion goes on without it as before.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from converters.errors import ConversionError
from converters.sources import SourceKind, detect_source

__all__ = ["Need", "check_requirements", "missing", "needed"]


@dataclass(frozen=True)
class Need:
    module: str  # the name imported
    extra: str  # the edge-runtime extra whose install brings it
    purpose: str  # what the conversion uses it for


OPENVINO = Need("openvino", "openvino", "reading the model")
MATPLOTLIB = Need("matplotlib", "convert", "report.png")
NNCF = Need("nncf", "convert", "openvino/int8")
ONNX = Need("onnx", "convert", "reading ONNX files")  # metadata, weights, quantization
TENSORFLOW = Need("tensorflow", "convert", "TensorFlow models")
KERAS = Need("keras", "convert", "Keras models")
TORCH = Need("torch", "pytorch", "PyTorch models")
# ONNX Runtime checks a PyTorch export, quantizes onnx/int8 and runs the ONNX variants through the runtime
ONNXRUNTIME_EXPORT = Need("onnxruntime", "onnx", "checking the PyTorch export")
ONNXRUNTIME_VARIANTS = Need("onnxruntime", "onnx", "the onnx variants")
# extras that the convert extra installs too, so that one install command suffices
_WITHIN_CONVERT = frozenset({"openvino", "litert", "onnx"})


def needed(model: Path, variant_ids: tuple[str, ...] | None) -> list[Need]:
    """What converting `model` into `variant_ids` (None: the defaults for its format) imports on the way."""
    from converters.pytorch_source import is_factory_spec
    from converters.variants import default_variants

    kind = None if is_factory_spec(str(model)) else detect_source(model).kind
    pytorch = kind in (None, SourceKind.TORCHSCRIPT, SourceKind.EXPORTED_PROGRAM)  # exported to ONNX first
    if variant_ids is None:
        variant_ids = default_variants(SourceKind.ONNX if pytorch or kind is None else kind)
    needs = [OPENVINO, MATPLOTLIB]
    if pytorch:
        needs += [TORCH, ONNXRUNTIME_EXPORT, ONNX]
    elif kind is SourceKind.ONNX:
        needs.append(ONNX)
    elif kind is SourceKind.KERAS:
        needs += [TENSORFLOW, KERAS]
    elif kind is SourceKind.SAVED_MODEL:
        needs.append(TENSORFLOW)
    if any(v.startswith("onnx/") for v in variant_ids):
        needs += [ONNXRUNTIME_VARIANTS, ONNX]
    if "openvino/int8" in variant_ids:
        needs.append(NNCF)
    return needs


def missing(needs: list[Need]) -> list[Need]:
    """The needs whose module is not installed, each module once."""
    absent: dict[str, Need] = {}
    for need in needs:
        if need.module not in absent and importlib.util.find_spec(need.module) is None:
            absent[need.module] = need
    return list(absent.values())


def check_requirements(needs: list[Need]) -> None:
    """Raise ConversionError naming each missing module, what needs it and the extra that installs it."""
    absent = missing(needs)
    if not absent:
        return
    named = ", ".join(f"{n.module} (for {n.purpose}; extra '{n.extra}')" for n in absent)
    extras = {n.extra for n in absent}
    if "convert" in extras:
        extras -= _WITHIN_CONVERT
    install = f"pip install 'edge-runtime[{','.join(sorted(extras))}]'"
    raise ConversionError(f"this conversion needs Python modules that are not installed: {named}; {install}")
