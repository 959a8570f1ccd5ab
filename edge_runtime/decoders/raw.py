"""Every output tensor as numbers, for models no decoder understands yet.

Subscribers get each output's shape and its first `max_values` values (flattened in C order,
dequantized, rounded), so a segmentation map or a feature tensor cannot turn into a multi-megabyte
message; `truncated` says when values were left out. NaN and infinities, which JSON cannot carry,
become null.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import Field

from edge_runtime.backends.base import TensorSpec
from edge_runtime.decoders.base import Decoder, DecoderParams, dequantize
from edge_runtime.decoders.decoded import RawOutputs, RawTensor
from edge_runtime.pipeline.preprocess import FrameTransform


class RawParams(DecoderParams):
    max_values: int = Field(default=1000, ge=1)  # per output
    decimals: int = Field(default=5, ge=0, le=12)
    dequantize: bool = True  # False: integers exactly as the model emitted them


class RawDecoder(Decoder):
    name = "raw"
    gives = RawOutputs
    params_type = RawParams

    def __init__(self, params: RawParams, labels: tuple[str, ...]) -> None:
        self.params = params

    def decode(
        self, outputs: Sequence[np.ndarray], specs: Sequence[TensorSpec], transform: FrameTransform | None = None
    ) -> RawOutputs:
        arrays = dequantize(outputs, specs) if self.params.dequantize else list(outputs)
        return RawOutputs(tuple(self._tensor(array, spec.name) for array, spec in zip(arrays, specs, strict=True)))

    def _tensor(self, array: np.ndarray, name: str) -> RawTensor:
        head = np.asarray(array).reshape(-1)[: self.params.max_values]
        values: tuple[float | None, ...]
        if np.issubdtype(head.dtype, np.integer) or head.dtype == np.bool_:
            values = tuple(int(v) for v in head.tolist())
        else:
            values = tuple(round(v, self.params.decimals) if math.isfinite(v) else None for v in head.tolist())
        return RawTensor(name, tuple(int(d) for d in array.shape), values, array.size > self.params.max_values)
