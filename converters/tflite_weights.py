"""Zeros in a TFLite model's weights, read from the flatbuffer itself.

The interpreter cannot say which tensors are constants, and a sparse weight tensor's buffer holds only
its stored values, so the file is read with LiteRT's flatbuffer schema: a dense weight counts its
zero values; a sparse one counts every position its encoding leaves out as zero too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

MIN_WEIGHT_SIZE = 16
_DTYPES = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64, 7: np.int16, 9: np.int8, 10: np.float64}


def _schema() -> Any:
    try:
        from ai_edge_litert import schema_py_generated
    except ImportError:  # TensorFlow ships the same generated module
        from tensorflow.lite.python import schema_py_generated
    return schema_py_generated


def tflite_weight_counts(path: Path) -> tuple[int, int]:
    """(weights, zeros) over the constant tensors with two or more dimensions."""
    content = path.read_bytes()
    model = _schema().ModelT.InitFromPackedBuf(bytearray(content), 0)
    total = zeros = 0
    for subgraph in model.subgraphs or []:
        for tensor in subgraph.tensors or []:
            values = _constant_values(model, tensor, content)
            dense_size = int(np.prod(tensor.shape)) if tensor.shape is not None else 0
            if values is None or len(tensor.shape) < 2 or dense_size < MIN_WEIGHT_SIZE:
                continue
            total += dense_size
            zeros += dense_size - int(np.count_nonzero(values))
    return total, zeros


def _constant_values(model: Any, tensor: Any, content: bytes) -> np.ndarray | None:
    """The stored values of a constant tensor (all of them if dense, the kept ones if sparse); None otherwise."""
    dtype = _DTYPES.get(int(tensor.type))
    if dtype is None or tensor.buffer is None or tensor.buffer <= 0 or tensor.buffer >= len(model.buffers):
        return None
    buffer = model.buffers[tensor.buffer]
    if buffer.data is not None and len(buffer.data):
        raw = np.asarray(buffer.data, np.uint8).tobytes()
    elif buffer.offset and buffer.offset > 1 and buffer.size:  # large models keep weights after the flatbuffer
        raw = content[buffer.offset : buffer.offset + buffer.size]
    else:
        return None
    return np.frombuffer(raw, dtype=dtype)
