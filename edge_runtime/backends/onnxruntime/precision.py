"""The precision an ONNX model really runs at under ONNX Runtime, read from the file and the active provider.

ONNX Runtime reports no precision of its own, so it is worked out from the graph (quantized ops,
float16 tensors) and from what the provider that took the graph does with float ops.
"""

from __future__ import annotations

import logging
import mmap
from dataclasses import dataclass
from pathlib import Path

from edge_runtime.backends.onnxruntime.providers import OPENVINO, TENSORRT
from edge_runtime.errors import BackendUnavailableError
from edge_runtime.package.manifest import Precision

# Logged under the backend's name, the one logger a user sets up for ONNX Runtime.
log = logging.getLogger("edge_runtime.backends.onnxruntime.backend")

# Op types that only appear in quantized graphs (QDQ, QOperator and integer-matmul forms).
QUANTIZED_MARKERS = ("QuantizeLinear", "QLinear", "MatMulInteger", "ConvInteger", "QGemm")
PRECISION_RANK = {"int8": 0, "fp16": 1, "bf16": 1, "fp32": 2}


@dataclass(frozen=True)
class ModelFacts:
    quantized: bool
    float16: bool


def inspect_model(path: Path) -> ModelFacts:
    """Read what precision a model file computes at, with the `onnx` package when it is installed."""
    try:
        import onnx
    except ImportError:
        return scan_model_bytes(path)
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception:
        return scan_model_bytes(path)
    quantized = any(marker in node.op_type for node in graph.node for marker in QUANTIZED_MARKERS)
    float16 = any(t.data_type == onnx.TensorProto.FLOAT16 for t in graph.initializer) or any(
        v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for v in graph.input
    )
    return ModelFacts(quantized=quantized, float16=float16)


def scan_model_bytes(path: Path) -> ModelFacts:
    """Without `onnx`: op types are plain strings in the protobuf, so a byte search finds them.

    fp16 weights cannot be seen this way; the caller adds fp16 inputs/outputs from the session.
    """
    try:
        with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            quantized = any(data.find(marker.encode()) >= 0 for marker in QUANTIZED_MARKERS)
    except (OSError, ValueError):
        quantized = False
    return ModelFacts(quantized=quantized, float16=False)


def effective_precision(facts: ModelFacts, active: str, trt_fp16: bool, openvino_device: str | None) -> str:
    """The precision inference really runs at, given the provider that actually took the graph."""
    if facts.quantized:
        return "int8"
    if facts.float16:
        return "fp16"
    if active == TENSORRT and trt_fp16:
        return "fp16"
    if active == OPENVINO and (openvino_device or "").split(".")[0] in ("GPU", "NPU"):
        return "fp16"  # OpenVINO's default inference precision on those devices
    return "fp32"


def check_precision(wanted: Precision | None, precision: str, where: str) -> None:
    """Refuse to run lower than asked (accuracy would drop unnoticed); running higher only warns."""
    if wanted is None or wanted.value == precision:
        return
    if PRECISION_RANK[precision] < PRECISION_RANK[wanted.value]:
        raise BackendUnavailableError(
            f"{where} runs at {precision}, lower than the {wanted.value} asked for; use a {wanted.value} variant"
        )
    log.warning("%s runs at %s, not the %s asked for", where, precision, wanted.value)
