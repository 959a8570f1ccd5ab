"""The Open Inference Protocol (KServe v2, as Triton speaks it): infer requests in, responses out.

Both encodings a client may use are read and written: tensors as JSON (`data`, flattened or nested,
row-major), and the binary tensor data extension, where the JSON header names each tensor's
`binary_data_size` and the raw little-endian bytes follow it in the body, the header's length given
by `Inference-Header-Content-Length` (what `tritonclient.http` sends by default, since it skips
turning millions of numbers into text). BYTES tensors carry each element behind a 4-byte length.

Everything here is checked against the served model before any of it reaches a backend: an unknown
or missing input, a datatype or shape the model does not take, or a body whose sizes disagree is a
`ProtocolError` naming the tensor and what was expected, which the HTTP layer answers with its status.
The JSON is read as `strict_json` reads it: nested at most 64 deep, without NaN or Infinity, which JSON
does not have; a tensor's values must also fit its datatype. Non-finite outputs are written as strings
(see `_json_values`), since JSON has no number for them either.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge_runtime import strict_json
from edge_runtime.backends.base import TensorSpec

__all__ = [
    "DATATYPES",
    "IMAGE_TYPES",
    "InferRequest",
    "ProtocolError",
    "RequestBody",
    "datatype_of",
    "encode_response",
    "parse_request",
    "split_request",
    "tensor_metadata",
]

# OIP datatype → numpy dtype. BYTES holds Python bytes objects; BF16 has no numpy type and is refused.
DATATYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}
_BY_DTYPE = {dtype.name: name for name, dtype in DATATYPES.items() if name != "BYTES"}
_DATATYPE_OF: dict[Any, str] = {**_BY_DTYPE, **{np.dtype(dtype): name for dtype, name in _BY_DTYPE.items()}}
HEADER_LENGTH = "Inference-Header-Content-Length"
IMAGE_TYPES = ("image/jpeg", "image/png", "image/jpg")  # the content types of an image body
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


class ProtocolError(Exception):
    """A request the model cannot take, with the HTTP status it is answered with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class RequestBody:
    """A request body split once: its JSON header parsed, and a view of the binary data after it.

    The view is not a copy: binary tensors are read from the body's own memory, and where the body is
    writable (as the HTTP endpoint reads it) so are the arrays made from it, so a backend can read them
    in place too.
    """

    document: dict[str, Any]
    binary: memoryview


@dataclass(frozen=True)
class InferRequest:
    inputs: dict[str, np.ndarray]  # by input name, in the model's dtypes and shapes
    request_id: str | None = None
    outputs: tuple[str, ...] | None = None  # the outputs asked for; None: every output
    binary_outputs: frozenset[str] = frozenset()  # outputs to return as binary data
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def batch(self) -> int:
        """How many samples the request holds along the first dimension."""
        return int(next(iter(self.inputs.values())).shape[0]) if self.inputs else 0


def datatype_of(dtype: str | np.dtype[Any]) -> str:
    """The OIP datatype of a numpy dtype (or dtype name): 'float32' -> 'FP32'."""
    known = _DATATYPE_OF.get(dtype)
    if known is not None:
        return known
    name = np.dtype(dtype).name
    if name not in _BY_DTYPE:
        raise ProtocolError(f"tensors of type {name} cannot be served")
    return _BY_DTYPE[name]


def tensor_metadata(spec: TensorSpec, max_batch_size: int) -> dict[str, Any]:
    """A tensor as model metadata lists it; -1 marks a dimension the client chooses (the batch, or dynamic)."""
    shape = [-1 if dim is None else dim for dim in spec.shape]
    if max_batch_size > 0 and shape:
        shape[0] = -1
    return {"name": spec.name, "datatype": datatype_of(spec.dtype), "shape": shape}


def split_request(body: bytes | bytearray | memoryview, header_length: int | None) -> RequestBody:
    """`body` as its JSON header and binary data; `header_length` is the `Inference-Header-Content-Length`
    header, present when binary data follows the JSON."""
    view = memoryview(body)
    if header_length is None:
        return RequestBody(_json_object(bytes(view)), view[len(view) :])
    if header_length < 0 or header_length > len(view):
        raise ProtocolError(f"{HEADER_LENGTH} is {header_length}, but the body has {len(view)} bytes")
    return RequestBody(_json_object(bytes(view[:header_length])), view[header_length:])


def parse_request(body: RequestBody, specs: Sequence[TensorSpec], max_batch_size: int) -> InferRequest:
    """The request in `body` checked against the model's inputs `specs`.

    With `max_batch_size` > 0 the first dimension of every input may be 1..max_batch_size (all inputs
    the same); otherwise shapes must be the model's, a dynamic dimension taking any size.
    """
    document, binary = body.document, body.binary
    raw_inputs = document.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise ProtocolError("the request has no 'inputs' list")
    expected = {spec.name: spec for spec in specs}
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for index, raw in enumerate(raw_inputs):
        if not isinstance(raw, dict):
            raise ProtocolError(f"inputs[{index}] is not an object")
        name = raw.get("name")
        if not isinstance(name, str) or name not in expected:
            known = ", ".join(expected)
            raise ProtocolError(f"inputs[{index}]: unknown input {name!r}; the model takes {known}")
        if name in inputs:
            raise ProtocolError(f"input {name!r} is given twice")
        array, offset = _read_input(raw, expected[name], binary, offset)
        inputs[name] = array
    missing = [name for name in expected if name not in inputs]
    if missing:
        raise ProtocolError(f"missing input {missing[0]!r}; the model takes {', '.join(expected)}")
    if offset != len(binary):
        raise ProtocolError(f"the body holds {len(binary) - offset} bytes of binary data no input claims")
    _check_shapes(inputs, expected, max_batch_size)
    outputs, binary_outputs = _requested_outputs(document)
    request_id = document.get("id")
    parameters = document.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise ProtocolError("'parameters' must be an object")
    return InferRequest(
        inputs, None if request_id is None else str(request_id), outputs, binary_outputs, dict(parameters)
    )


def encode_response(
    model_name: str,
    model_version: str,
    request: InferRequest,
    outputs: Mapping[str, np.ndarray],
) -> tuple[bytes, dict[str, str]]:
    """The response body and its headers: JSON, followed by binary data for the outputs asked for that way."""
    wanted = request.outputs or tuple(outputs)
    all_binary = bool(request.parameters.get("binary_data_output"))
    rows = []
    chunks: list[memoryview] = []  # the arrays' own bytes where they can be: the join is their one copy
    for name in wanted:
        array = outputs[name]
        row: dict[str, Any] = {"name": name, "datatype": datatype_of(array.dtype), "shape": list(array.shape)}
        if all_binary or name in request.binary_outputs:
            little = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<"), copy=False))
            data = little.reshape(-1).view(np.uint8)
            row["parameters"] = {"binary_data_size": data.nbytes}
            chunks.append(data.data)
        else:
            row["data"] = _json_values(array)
        rows.append(row)
    response: dict[str, Any] = {"model_name": model_name, "model_version": model_version, "outputs": rows}
    if request.request_id is not None:
        response["id"] = request.request_id
    header = json.dumps(response, separators=(",", ":")).encode()
    if not chunks:
        return header, {"Content-Type": "application/json"}
    return b"".join([header, *chunks]), {
        "Content-Type": "application/octet-stream",
        HEADER_LENGTH: str(len(header)),
    }


def _json_values(array: np.ndarray) -> list[Any]:
    """The tensor's elements as JSON values. JSON has no NaN or infinity, and a reader that follows the grammar
    (the KServe SDK's, a browser's, Go's) refuses the whole answer when Python writes its `NaN` or `Infinity`,
    so non-finite elements are the strings "NaN", "Infinity" and "-Infinity": every JSON reader takes them,
    and they keep the three apart (null would not). numpy reads them back as the numbers, so
    `tritonclient`'s `as_numpy` returns the model's output bit for bit, as JavaScript's `Number()` and Java's
    `Double.parseDouble` do."""
    values: list[Any] = array.reshape(-1).tolist()
    if array.dtype.kind != "f" or np.isfinite(array).all():
        return values
    return [value if math.isfinite(value) else _NON_FINITE[str(value)] for value in values]


def _json_object(header: bytes) -> dict[str, Any]:
    """The request's JSON, read as `strict_json` reads it: nested at most `MAX_DEPTH` deep, NaN and Infinity
    refused. A body that is no JSON at all is most often an image sent without its content type."""
    try:
        document = strict_json.loads(header, "the request")
    except strict_json.JsonRefused as error:
        hint = f" (an image needs the content type {' or '.join(IMAGE_TYPES[:2])})" if error.syntax else ""
        raise ProtocolError(f"{error}{hint}") from None
    if not isinstance(document, dict):
        raise ProtocolError("the request must be a JSON object")
    return document


def _read_input(raw: dict[str, Any], spec: TensorSpec, binary: memoryview, offset: int) -> tuple[np.ndarray, int]:
    name = spec.name
    datatype = raw.get("datatype")
    want = datatype_of(spec.dtype)
    if datatype != want:
        raise ProtocolError(f"input {name!r}: datatype {datatype!r}, but the model takes {want}")
    shape = raw.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ProtocolError(f"input {name!r}: 'shape' must be a list of non-negative integers")
    count = math.prod(shape)
    dtype = DATATYPES[want]
    parameters = raw.get("parameters") or {}
    size = parameters.get("binary_data_size") if isinstance(parameters, dict) else None
    if size is not None:
        if not isinstance(size, int) or size < 0:
            raise ProtocolError(f"input {name!r}: binary_data_size must be a non-negative integer")
        if offset + size > len(binary):
            raise ProtocolError(
                f"input {name!r}: binary_data_size {size}, but only {len(binary) - offset} bytes of binary data remain"
            )
        if size != count * dtype.itemsize:
            needed = count * dtype.itemsize
            raise ProtocolError(
                f"input {name!r}: shape {shape} of {want} needs {needed} bytes, binary_data_size is {size}"
            )
        array = np.frombuffer(binary, dtype.newbyteorder("<"), count, offset).astype(dtype, copy=False)
        return array.reshape(shape), offset + size
    if "data" not in raw:
        raise ProtocolError(f"input {name!r} has neither 'data' nor parameters.binary_data_size")
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # a number past the type's range is infinite: refused below
            array = np.asarray(raw["data"], dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        raise ProtocolError(f"input {name!r}: 'data' is not a list of {want} values") from None
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        largest = float(np.finfo(dtype).max)
        raise ProtocolError(
            f"input {name!r}: 'data' holds a value that is no finite {want} number (NaN, infinite, or beyond "
            f"±{largest:.4g})"
        )
    if array.size != count:
        raise ProtocolError(f"input {name!r}: shape {shape} holds {count} elements, 'data' has {array.size}")
    return array.reshape(shape), offset


def _check_shapes(inputs: dict[str, np.ndarray], specs: dict[str, TensorSpec], max_batch_size: int) -> None:
    batches = set()
    for name, array in inputs.items():
        model_shape = specs[name].shape
        if len(array.shape) != len(model_shape):
            raise ProtocolError(f"input {name!r}: shape {list(array.shape)}, but the model takes {_shown(model_shape)}")
        dims = list(zip(array.shape, model_shape, strict=True))
        if max_batch_size > 0 and dims:
            batch = array.shape[0]
            if not 1 <= batch <= max_batch_size:
                raise ProtocolError(
                    f"input {name!r}: a batch of {batch}, but this model takes 1 to {max_batch_size} at a time"
                )
            batches.add(batch)
            dims = dims[1:]
        for got, want in dims:
            if want is not None and got != want:
                raise ProtocolError(
                    f"input {name!r}: shape {list(array.shape)}, but the model takes {_shown(model_shape)}"
                )
    if len(batches) > 1:
        raise ProtocolError(f"the inputs disagree on the batch size: {sorted(batches)}")


def _requested_outputs(document: dict[str, Any]) -> tuple[tuple[str, ...] | None, frozenset[str]]:
    raw = document.get("outputs")
    if raw is None:
        return None, frozenset()
    if not isinstance(raw, list):
        raise ProtocolError("'outputs' must be a list")
    names, binary = [], set()
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ProtocolError(f"outputs[{index}] must be an object with a 'name'")
        names.append(item["name"])
        parameters = item.get("parameters") or {}
        if isinstance(parameters, dict) and parameters.get("binary_data"):
            binary.add(item["name"])
    return tuple(names), frozenset(binary)


def _shown(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("-1" if d is None else str(d) for d in shape) + "]"
