from __future__ import annotations

import numpy as np
import pytest

from edge_runtime.backends.base import Quantization, TensorSpec
from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.decoded import Anomaly, Regression
from edge_runtime.errors import ConfigError, ModelMismatchError


def test_anomaly_score_against_the_threshold() -> None:
    decoder = make_decoder("anomaly", {"threshold": 0.5}, ())
    spec = TensorSpec("pred_score", (1, 1), "float32")
    normal = decoder.decode([np.asarray([[0.2]], np.float32)], [spec])
    anomalous = decoder.decode([np.asarray([[0.73]], np.float32)], [spec])
    assert isinstance(normal, Anomaly) and isinstance(anomalous, Anomaly)
    assert normal.to_dict() == {"score": 0.2, "anomalous": False} and normal.signature() == ("normal",)
    assert anomalous.to_dict() == {"score": 0.73, "anomalous": True} and anomalous.signature() == ("anomalous",)
    assert anomalous.top_score == pytest.approx(0.73)
    # at the threshold exactly is still normal: anomalous means above it
    assert decoder.decode([np.asarray([[0.5]], np.float32)], [spec]).to_dict()["anomalous"] is False


def test_anomaly_map_reduced_by_max_or_mean_and_chosen_by_name() -> None:
    anomaly_map = np.zeros((1, 4, 4, 1), np.float32)
    anomaly_map[0, 1, 2, 0] = 0.8
    specs = [TensorSpec("image", (1, 8), "float32"), TensorSpec("anomaly_map", (1, 4, 4, 1), "float32")]
    outputs = [np.ones((1, 8), np.float32), anomaly_map]
    by_max = make_decoder("anomaly", {"threshold": 0.5, "output": "anomaly_map"}, ()).decode(outputs, specs)
    by_mean = make_decoder("anomaly", {"threshold": 0.5, "output": 1, "reduce": "mean"}, ()).decode(outputs, specs)
    assert by_max.to_dict() == {"score": 0.8, "anomalous": True}
    assert by_mean.to_dict() == {"score": 0.05, "anomalous": False}


def test_quantized_anomaly_score() -> None:
    spec = TensorSpec("score", (1, 1), "uint8", Quantization(0.01, 10))
    result = make_decoder("anomaly", {"threshold": 1.0}, ()).decode([np.asarray([[160]], np.uint8)], [spec])
    assert result.to_dict() == {"score": 1.5, "anomalous": True}


def test_regression_values_named_scaled_and_from_every_output() -> None:
    specs = [TensorSpec("temperature", (1, 1), "float32"), TensorSpec("humidity", (1, 1), "int8", Quantization(0.5, 0))]
    outputs = [np.asarray([[0.25]], np.float32), np.asarray([[-60]], np.int8)]
    decoder = make_decoder("regression", {"names": ["t", "h"], "scale": 100.0, "offset": 1.0}, ())
    result = decoder.decode(outputs, specs)
    assert isinstance(result, Regression)
    assert result.to_dict() == {"values": {"t": 26.0, "h": -2999.0}}
    assert result.top_score is None


def test_regression_names_from_labels_or_positions() -> None:
    spec = TensorSpec("out", (1, 2), "float32")
    output = np.asarray([[1.5, -2.0]], np.float32)
    assert make_decoder("regression", {}, ("x", "y")).decode([output], [spec]).to_dict() == {
        "values": {"x": 1.5, "y": -2.0}
    }
    assert make_decoder("regression", {}, ()).decode([output], [spec]).to_dict() == {
        "values": {"value0": 1.5, "value1": -2.0}
    }
    single = make_decoder("regression", {"outputs": ["out"]}, ()).decode([output[:, :1]], [spec])
    assert single.to_dict() == {"values": {"value": 1.5}}


def test_regression_signature_changes_only_by_resolution() -> None:
    spec = TensorSpec("out", (1, 1), "float32")
    decoder = make_decoder("regression", {"names": ["level"], "resolution": 0.5}, ())
    signatures = [decoder.decode([np.asarray([[v]], np.float32)], [spec]).signature() for v in (2.1, 2.2, 2.8)]
    assert signatures[0] == signatures[1] != signatures[2]
    default = make_decoder("regression", {}, ())
    a, b, c = (default.decode([np.asarray([[v]], np.float32)], [spec]).signature() for v in (21.31, 21.34, 21.6))
    assert a == b == ("value=21.3",) and c == ("value=21.6",)


def test_regression_count_mismatch_names_the_expected_values() -> None:
    decoder = make_decoder("regression", {"names": ["a", "b", "c"]}, ())
    with pytest.raises(
        ModelMismatchError, match=r"expected 3 values \(one per name: a, b, c\), the selected outputs hold 2"
    ):
        decoder.decode([np.zeros((1, 2), np.float32)], [TensorSpec("o", (1, 2), "float32")])


@pytest.mark.parametrize(
    ("name", "params", "field"),
    [
        ("anomaly", {}, r"threshold: Field required"),
        ("anomaly", {"threshold": 1, "reduce": "median"}, "reduce"),
        ("regression", {"resolution": 0}, "resolution"),
        ("regression", {"names": []}, "names"),
    ],
)
def test_bad_parameters_name_the_field(name: str, params: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"decoder {name}: decoder\.params\.{field}"):
        make_decoder(name, params, ())


def test_values_json_cannot_carry_become_null() -> None:
    spec = TensorSpec("out", (1, 2), "float32")
    output = np.asarray([[np.nan, np.inf]], np.float32)
    result = make_decoder("regression", {"names": ["a", "b"], "resolution": 0.1}, ()).decode([output], [spec])
    assert result.to_dict() == {"values": {"a": None, "b": None}}
    assert result.signature() == ("a=nan", "b=inf")
    broken = make_decoder("anomaly", {"threshold": 0.5}, ()).decode([output[:, :1]], [spec])
    assert broken.to_dict() == {"score": None, "anomalous": False}
