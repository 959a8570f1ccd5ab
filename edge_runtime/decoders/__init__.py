"""Output decoders: raw model outputs become results a subscriber can use.

One small module per decoder family, each defining a `Decoder` subclass registered in `DECODERS` under
the name a manifest uses in `decoder.name`; the class is imported on first use. A new output format is
one module plus one line in `DECODERS`.
Every decoder returns a `Decoded` result (see `decoded.py` for what each task publishes, its score and
its change signature).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edge_runtime.config.registry import load_class
from edge_runtime.decoders.base import Decoder
from edge_runtime.decoders.decoded import Decoded

__all__ = ["DECODERS", "Decoded", "Decoder", "decoder_class", "make_decoder"]

DECODERS: dict[str, tuple[str, str]] = {
    "ssd_anchors": ("edge_runtime.decoders.ssd_anchors", "SsdAnchorDecoder"),
    "yolo": ("edge_runtime.decoders.yolo", "YoloDecoder"),
    "classification": ("edge_runtime.decoders.classification", "ClassificationDecoder"),
    "segmentation": ("edge_runtime.decoders.segmentation", "SegmentationDecoder"),
    "keypoints": ("edge_runtime.decoders.keypoints", "KeypointDecoder"),
    "anomaly": ("edge_runtime.decoders.scalar", "AnomalyDecoder"),
    "regression": ("edge_runtime.decoders.scalar", "RegressionDecoder"),
    "raw": ("edge_runtime.decoders.raw", "RawDecoder"),
}


def decoder_class(name: str) -> type[Decoder]:
    return load_class("decoder", name, DECODERS, Decoder)


def make_decoder(name: str, params: Mapping[str, Any], labels: tuple[str, ...] = ()) -> Decoder:
    return decoder_class(name).from_params(params, labels)
