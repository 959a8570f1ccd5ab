"""Models whose answer is a number or a few: anomaly scores and regressed values.

An anomaly model emits a score (or a per-pixel anomaly map, whose maximum is the usual image score);
the decoder compares it with the manifest's `threshold`, which belongs to the model because it is
calibrated on that model's normal data. A regression model emits one or more values, named by
`names` (or the manifest's labels) and optionally mapped back from the range it was trained on with
`scale` and `offset`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from edge_runtime.backends.base import TensorSpec
from edge_runtime.decoders.base import Decoder, DecoderParams, dequantize, select_output
from edge_runtime.decoders.decoded import Anomaly, Regression
from edge_runtime.errors import ModelMismatchError
from edge_runtime.pipeline.preprocess import FrameTransform


class AnomalyParams(DecoderParams):
    threshold: float  # anomalous when the score is above it
    output: int | str = 0
    reduce: Literal["max", "mean"] = "max"  # how an output of several values (an anomaly map) becomes one score


class AnomalyDecoder(Decoder):
    name = "anomaly"
    gives = Anomaly
    params_type = AnomalyParams

    def __init__(self, params: AnomalyParams, labels: tuple[str, ...]) -> None:
        self.params = params

    def decode(
        self, outputs: Sequence[np.ndarray], specs: Sequence[TensorSpec], transform: FrameTransform | None = None
    ) -> Anomaly:
        raw, spec = select_output(outputs, specs, self.params.output, self.name)
        [values] = dequantize([raw], [spec])
        if values.size == 0:
            raise ModelMismatchError("decoder anomaly: expected at least one score, the output is empty")
        score = float(values.max() if self.params.reduce == "max" else values.mean())
        return Anomaly(score=score, threshold=self.params.threshold)


class RegressionParams(DecoderParams):
    outputs: list[int | str] | None = Field(default=None, min_length=1)  # default: every output, in order
    names: list[str] | None = Field(default=None, min_length=1)  # default: the manifest's labels
    scale: float = 1.0  # published value = model value * scale + offset
    offset: float = 0.0
    resolution: float | None = Field(default=None, gt=0)  # the change that counts as news


class RegressionDecoder(Decoder):
    name = "regression"
    gives = Regression
    params_type = RegressionParams

    def __init__(self, params: RegressionParams, labels: tuple[str, ...]) -> None:
        self.params = params
        self.names = tuple(params.names) if params.names else labels

    def decode(
        self, outputs: Sequence[np.ndarray], specs: Sequence[TensorSpec], transform: FrameTransform | None = None
    ) -> Regression:
        selectors = self.params.outputs if self.params.outputs is not None else range(len(outputs))
        chosen = [select_output(outputs, specs, s, self.name) for s in selectors]
        arrays = dequantize([array for array, _ in chosen], [spec for _, spec in chosen])
        flat = np.concatenate([a.reshape(-1).astype(np.float64) for a in arrays] or [np.zeros(0)])
        if flat.size == 0:
            raise ModelMismatchError("decoder regression: expected at least one value, the outputs are empty")
        values = flat * self.params.scale + self.params.offset
        names = self.names or (("value",) if values.size == 1 else tuple(f"value{i}" for i in range(values.size)))
        if len(names) != values.size:
            raise ModelMismatchError(
                f"decoder regression: expected {len(names)} values (one per name: {', '.join(names)}), "
                f"the selected outputs hold {values.size}"
            )
        return Regression(
            tuple((name, float(v)) for name, v in zip(names, values, strict=True)), self.params.resolution
        )
