"""Output decoders: raw model outputs become results a subscriber can use.

One small module per decoder family, each defining a `Decoder` subclass registered here under the name
a manifest uses in `decoder.name`. A new output format is one module plus one line in `_DECODERS`.
Every decoder returns a `Decoded` result (see `decoded.py` for what each task publishes, its score and
its change signature).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from edge_runtime.decoders.base import Decoder
from edge_runtime.decoders.decoded import Decoded
from edge_runtime.errors import ConfigError

__all__ = ["Decoded", "Decoder", "decoder_names", "make_decoder"]

_DECODERS: dict[str, tuple[str, str]] = {
    "ssd_anchors": ("edge_runtime.decoders.ssd_anchors", "SsdAnchorDecoder"),
    "yolo": ("edge_runtime.decoders.yolo", "YoloDecoder"),
    "classification": ("edge_runtime.decoders.classification", "ClassificationDecoder"),
    "segmentation": ("edge_runtime.decoders.segmentation", "SegmentationDecoder"),
    "keypoints": ("edge_runtime.decoders.keypoints", "KeypointDecoder"),
    "anomaly": ("edge_runtime.decoders.scalar", "AnomalyDecoder"),
    "regression": ("edge_runtime.decoders.scalar", "RegressionDecoder"),
    "raw": ("edge_runtime.decoders.raw", "RawDecoder"),
}


def decoder_names() -> tuple[str, ...]:
    return tuple(_DECODERS)


def make_decoder(name: str, params: Mapping[str, Any], labels: tuple[str, ...] = ()) -> Decoder:
    if name not in _DECODERS:
        raise ConfigError(f"unknown decoder {name!r}; known decoders: {', '.join(_DECODERS)}")
    module_name, class_name = _DECODERS[name]
    decoder_type: type[Decoder] = getattr(importlib.import_module(module_name), class_name)
    return decoder_type.from_params(params, labels)
