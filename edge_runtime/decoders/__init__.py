"""Output decoders: raw model outputs become results a subscriber can use.

One small module per decoder family, each registering a `Decoder` subclass under the name a manifest
uses in `decoder.name`. A new output format is one module here plus one line in `_MODULES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from edge_runtime.decoders.base import Decoder
from edge_runtime.errors import ConfigError

_MODULES: dict[str, str] = {
    "ssd_anchors": "edge_runtime.decoders.ssd_anchors",
}


def make_decoder(name: str, params: Mapping[str, Any], labels: tuple[str, ...] = ()) -> Decoder:
    if name not in _MODULES:
        raise ConfigError(f"unknown decoder {name!r}; known decoders: {', '.join(_MODULES)}")
    module = importlib.import_module(_MODULES[name])
    decoder_type: type[Decoder] = module.DECODER
    return decoder_type.from_params(params, labels)
