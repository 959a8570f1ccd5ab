"""The Open Inference Protocol's request reading: one split of the body, tensors read from its own memory; JSON
as the grammar has it, in and out."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edge_runtime import strict_json
from edge_runtime.backends.base import TensorSpec
from edge_runtime.serving.http import _aligned_buffer
from edge_runtime.serving.protocol import InferRequest, ProtocolError, encode_response, parse_request, split_request

SPEC = TensorSpec("image", (None, 3, 4, 4), "float32")


def binary_request(array: np.ndarray) -> tuple[bytes, int]:
    header = {
        "inputs": [
            {"name": "image", "shape": list(array.shape), "datatype": "FP32",
             "parameters": {"binary_data_size": array.nbytes}}
        ]
    }  # fmt: skip
    head = json.dumps(header).encode()
    return head + array.tobytes(), len(head)


def test_binary_tensors_are_read_from_a_writable_body_in_place() -> None:
    array = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)
    raw, header_length = binary_request(array)
    body = _aligned_buffer(len(raw), header_length)
    body[:] = raw
    request = parse_request(split_request(body, header_length), [SPEC], max_batch_size=8)
    image = request.inputs["image"]
    np.testing.assert_array_equal(image, array)
    assert np.shares_memory(image, np.frombuffer(body, np.uint8))  # not a copy
    assert image.flags.writeable and image.flags.aligned and image.ctypes.data % 64 == 0


def test_binary_tensors_from_immutable_bytes_are_read_alike() -> None:
    array = np.linspace(-1, 1, 3 * 4 * 4, dtype=np.float32).reshape(1, 3, 4, 4)
    raw, header_length = binary_request(array)
    request = parse_request(split_request(raw, header_length), [SPEC], max_batch_size=8)
    np.testing.assert_array_equal(request.inputs["image"], array)
    assert not request.inputs["image"].flags.writeable  # a backend copies these before reading them


@pytest.mark.parametrize("aligned_at", [0, 1, 63, 64, 173, 1000])
def test_an_aligned_buffer_puts_the_given_byte_on_a_64_byte_line(aligned_at: int) -> None:
    buffer = _aligned_buffer(4096, aligned_at)
    assert len(buffer) == 4096 and not buffer.readonly
    assert (np.frombuffer(buffer, np.uint8).ctypes.data + aligned_at) % 64 == 0


def test_a_header_length_past_the_body_or_a_header_that_is_no_object_is_refused() -> None:
    raw, header_length = binary_request(np.zeros((1, 3, 4, 4), np.float32))
    with pytest.raises(ProtocolError, match=f"is {len(raw) + 1}, but the body has {len(raw)} bytes"):
        split_request(raw, len(raw) + 1)
    with pytest.raises(ProtocolError, match="must be a JSON object"):
        split_request(b"[1, 2]", None)
    with pytest.raises(ProtocolError, match="not valid JSON at line 1"):
        split_request(raw, header_length - 1)


def json_request(data: str) -> bytes:
    return b'{"inputs": [{"name": "image", "shape": [1, 3, 4, 4], "datatype": "FP32", "data": %s}]}' % data.encode()


@pytest.mark.parametrize(
    ("data", "refusal"),
    [
        ("[NaN" + ", 0" * 47 + "]", "the request holds NaN, which is no JSON number"),
        ("[Infinity" + ", 0" * 47 + "]", "the request holds Infinity, which is no JSON number"),
        ("[-Infinity" + ", 0" * 47 + "]", "the request holds -Infinity, which is no JSON number"),
        ("[1e39" + ", 0" * 47 + "]", "input 'image': 'data' holds a value that is no finite FP32 number"),
        ('["nan"' + ", 0" * 47 + "]", "input 'image': 'data' holds a value that is no finite FP32 number"),
        ("[" * 100 + "0" + "]" * 100, "the request is nested deeper than 64 levels of arrays and objects"),
    ],
    ids=["NaN", "Infinity", "-Infinity", "beyond-FP32", "nan-string", "deep"],
)
def test_json_without_finite_numbers_or_nested_too_deep_is_refused(data: str, refusal: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        parse_request(split_request(json_request(data), None), [SPEC], max_batch_size=8)
    assert refused.value.status == 400 and refused.value.message.startswith(refusal), refused.value.message


def test_a_body_that_is_no_json_hints_at_the_content_type_of_an_image() -> None:
    for body in (b"\xff\xd8\xff\xe0\x00\x10JFIF", b"\x89PNG\r\n\x1a\n"):
        with pytest.raises(ProtocolError, match=r"not valid JSON.*\(an image needs the content type image/jpeg or "):
            split_request(body, None)


def test_non_finite_outputs_are_strings_every_json_reader_takes_and_numpy_reads_back() -> None:
    outputs = np.array([[1.5, np.nan, np.inf, -np.inf]], np.float32)
    request = InferRequest({"image": np.zeros((1, 3, 4, 4), np.float32)})
    body, headers = encode_response("m", "1", request, {"scores": outputs})
    assert headers["Content-Type"] == "application/json"
    (row,) = strict_json.loads(body)["outputs"]  # the grammar's JSON: no NaN, no Infinity
    assert row["data"] == [1.5, "NaN", "Infinity", "-Infinity"]
    read_back = np.array(row["data"], np.float32).reshape(row["shape"])  # what tritonclient's as_numpy does
    np.testing.assert_array_equal(read_back, outputs)
