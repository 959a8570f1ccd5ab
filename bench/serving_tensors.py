"""The Open Inference Protocol's binary tensor extension, as the FastAPI and LitServe sides of `serving.py` read
and write it: a JSON header of `Inference-Header-Content-Length` bytes, then each tensor's raw bytes.

Triton and edge_runtime speak it natively; the sides written here parse the same bodies, so that every side is
sent the same bytes and answers with the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

HEADER_LENGTH = "Inference-Header-Content-Length"


def read_request(body: bytes, header_length: int) -> list[np.ndarray]:
    """The request's input tensors, in the order its header names them, viewed in place in `body`."""
    header = json.loads(body[:header_length])
    arrays, offset = [], header_length
    for tensor in header["inputs"]:
        size = tensor["parameters"]["binary_data_size"]
        arrays.append(np.frombuffer(body, np.float32, size // 4, offset).reshape(tensor["shape"]))
        offset += size
    return arrays


def answer(model_name: str, outputs: Sequence[tuple[str, np.ndarray]]) -> tuple[bytes, dict[str, str]]:
    """The response body and its headers, the outputs as binary data."""
    rows, chunks = [], []
    for name, array in outputs:
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        rows.append({"name": name, "datatype": "FP32", "shape": list(array.shape),
                     "parameters": {"binary_data_size": len(data)}})  # fmt: skip
        chunks.append(data)
    head = json.dumps({"model_name": model_name, "outputs": rows}).encode()
    return head + b"".join(chunks), {HEADER_LENGTH: str(len(head))}
