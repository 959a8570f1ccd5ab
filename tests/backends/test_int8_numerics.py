"""int8 numerics that hold on every CPU: the same integers with 7-bit weights, and where 8-bit ones differ.

x86 CPUs without VNNI or AMX add pairs of int8 products in 16 bits and saturate on full-range weights;
VNNI, AMX and ARM accumulate in 32 bits. The tests hold the OpenVINO and ONNX Runtime backends to the
ONNX reference implementation of the same QDQ graph, which computes what the specification defines.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from int8_models import reference_runner, saturating_conv_qdq, scale_of, tiny_images, weight_range

from edge_runtime.backends import load_backend
from edge_runtime.backends.base import Backend, ModelSource
from edge_runtime.hardware.cpu import read_cpu
from edge_runtime.package.manifest import ModelFormat, Precision

BACKENDS = ("openvino", "onnxruntime")
THIS_CPU = read_cpu(Path("/"))


def load(backend: str, path: Path, precision: Precision) -> Backend:
    options = {"device": "CPU", "precision": "fp32"} if precision is Precision.FP32 else {"device": "CPU"}
    return load_backend(backend, ModelSource(path, ModelFormat.ONNX, precision, "v", ""), options)


def saturating_model(tmp_path: Path, weight: int) -> tuple[Path, np.ndarray, np.ndarray, float]:
    model, x, exact_steps = saturating_conv_qdq(weight)
    path = tmp_path / f"conv_w{weight}.onnx"
    path.write_bytes(model)
    return path, x, exact_steps, scale_of(path, "y")


@pytest.mark.parametrize("backend", BACKENDS)
def test_seven_bit_weights_compute_the_exact_integers_on_every_cpu(backend: str, tmp_path: Path) -> None:
    path, x, exact_steps, step = saturating_model(tmp_path, weight=64)
    (out,) = load(backend, path, Precision.INT8).infer([x])
    np.testing.assert_array_equal(np.rint(out.ravel() / step), exact_steps)
    np.testing.assert_array_equal(np.rint(reference_runner(path)(x).ravel() / step), exact_steps)


@pytest.mark.parametrize("backend", BACKENDS)
def test_full_range_weights_saturate_exactly_where_pairs_add_in_16_bits(backend: str, tmp_path: Path) -> None:
    """Why the converter keeps weights to 7 bits: 2 x 255 x 127 overflows a 16-bit pair sum."""
    path, x, exact_steps, step = saturating_model(tmp_path, weight=127)
    (out,) = load(backend, path, Precision.INT8).infer([x])
    got = np.rint(out.ravel() / step)
    if THIS_CPU.int8_pairs_saturate:
        assert abs(got[0]) < abs(exact_steps[0]) and abs(got[1]) < abs(exact_steps[1]), (got, exact_steps)
    else:
        np.testing.assert_array_equal(got, exact_steps)
    assert got[2] == exact_steps[2] == 0  # products of opposite signs cancel within each pair: no overflow


@pytest.mark.parametrize("backend", BACKENDS)
def test_tiny_classifier_at_int8_follows_the_onnx_specification(
    backend: str, tiny_int8_onnx: Path, rng: np.random.Generator
) -> None:
    """The backend's int8 result is the specification's, within the rounding its requantizations may take.

    Integer kernels accumulate exactly; the only freedom is the float rescale before each requantization,
    which can round a value lying at half a step either way. At the softmax output that is one output step;
    one logit step lost upstream moves the probabilities by at most half a logit step (the softmax's
    derivatives sum to at most 1/2 per output).
    """
    assert weight_range(tiny_int8_onnx) == (-64, 64)
    tolerance = scale_of(tiny_int8_onnx, "probabilities") + 0.5 * scale_of(tiny_int8_onnx, "logits")
    model, specification = load(backend, tiny_int8_onnx, Precision.INT8), reference_runner(tiny_int8_onnx)
    batch = tiny_images(rng, 32)
    got = np.concatenate([model.infer([image])[0] for image in batch])
    want = np.concatenate([specification(image) for image in batch])
    assert np.abs(got - want).max() <= tolerance
