"""Which unpruned variants are built to compare with, and the speedups timed in alternating rounds."""

from __future__ import annotations

from converters.pruned_baselines import baseline_ids


def test_fp32_and_int8_of_each_backend_asked_for() -> None:
    asked = ("openvino/fp32", "openvino/fp16", "openvino/int8", "onnx/int8", "tflite/fp16")
    assert baseline_ids(asked) == ("openvino/fp32", "openvino/int8", "onnx/int8")
    assert baseline_ids(("tflite/fp16",)) == ()
