from __future__ import annotations

import json

import numpy as np
import pytest

from edge_runtime.backends.base import Quantization, TensorSpec
from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.decoded import RawOutputs
from edge_runtime.errors import ConfigError


def test_every_output_with_its_shape_capped_and_rounded() -> None:
    big = np.arange(5000, dtype=np.float32).reshape(1, 50, 100) / 3
    small = np.asarray([[1.0, np.nan, np.inf]], np.float32)
    specs = [TensorSpec("features", big.shape, "float32"), TensorSpec("head", small.shape, "float32")]
    result = make_decoder("raw", {"max_values": 4, "decimals": 2}, ()).decode([big, small], specs)
    assert isinstance(result, RawOutputs)
    message = result.to_dict()
    assert message == {
        "outputs": {
            "features": {"shape": [1, 50, 100], "values": [0.0, 0.33, 0.67, 1.0], "truncated": True},
            "head": {"shape": [1, 3], "values": [1.0, None, None], "truncated": False},
        }
    }
    json.dumps(message, allow_nan=False)  # valid JSON, no NaN literals
    assert result.top_score is None


def test_quantized_outputs_dequantized_unless_asked_not_to() -> None:
    q = np.asarray([[0, 128, 255]], np.uint8)
    spec = TensorSpec("probs", q.shape, "uint8", Quantization(1 / 255, 0))
    dequantized = make_decoder("raw", {"decimals": 3}, ()).decode([q], [spec])
    as_emitted = make_decoder("raw", {"dequantize": False}, ()).decode([q], [spec])
    assert dequantized.to_dict()["outputs"]["probs"]["values"] == [0.0, 0.502, 1.0]
    assert as_emitted.to_dict()["outputs"]["probs"]["values"] == [0, 128, 255]


def test_signature_follows_the_published_values() -> None:
    decoder = make_decoder("raw", {"decimals": 1}, ())
    spec = TensorSpec("o", (1, 2), "float32")
    a, b, c = (
        decoder.decode([np.asarray([v], np.float32)], [spec]).signature() for v in ([1.0, 2.0], [1.01, 2.0], [1.2, 2.0])
    )
    assert a == b != c


def test_bad_parameters_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"decoder raw: decoder\.params\.max_values"):
        make_decoder("raw", {"max_values": 0}, ())
