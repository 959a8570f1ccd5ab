from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_runtime.decoders import DECODERS, decoded, make_decoder
from edge_runtime.errors import ConfigError

SCHEMA = Path(__file__).resolve().parents[2] / "edge_runtime" / "schemas" / "result.schema.json"

MINIMAL_PARAMS: dict[str, dict[str, object]] = {
    "ssd_anchors": {"num_layers": 1, "strides": [8], "min_scale": 0.1, "max_scale": 0.5, "box_scale": 128},
    "yolo": {},
    "classification": {},
    "segmentation": {},
    "keypoints": {"format": "heatmap"},
    "anomaly": {"threshold": 0.5},
    "regression": {},
    "raw": {},
}


def test_every_registered_decoder_builds_under_its_own_name() -> None:
    assert set(DECODERS) == set(MINIMAL_PARAMS)
    for name, params in MINIMAL_PARAMS.items():
        assert make_decoder(name, params, ()).name == name


@pytest.mark.parametrize("name", sorted(MINIMAL_PARAMS))
def test_unknown_parameters_are_refused_by_every_decoder(name: str) -> None:
    with pytest.raises(ConfigError, match=rf"decoder {name}: decoder\.params\.colour: unknown field"):
        make_decoder(name, {**MINIMAL_PARAMS[name], "colour": "red"}, ())


def test_result_tasks_are_the_tasks_of_the_message_schema() -> None:
    tasks = {
        cls.task
        for cls in vars(decoded).values()
        if isinstance(cls, type) and issubclass(cls, decoded.Decoded) and cls is not decoded.Decoded
    }
    assert tasks == set(json.loads(SCHEMA.read_text())["properties"]["task"]["enum"])
