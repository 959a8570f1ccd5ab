"""Image or window classification: one score vector becomes the top classes with their labels.

Models end in different places: some already apply a softmax, some emit logits, multi-label models end
in a sigmoid. `activation: auto` (the default) treats a vector of values in 0..1 that sums to 1 as
probabilities and anything else as logits for a softmax; multi-label models should say `sigmoid`
(logits) or `none` (already probabilities), since their scores need not sum to 1. A quantized output
whose values all lie in 0..1 is taken as probabilities too, because rounding many small probabilities
moves their sum far more than a float model's would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from edge_runtime.backends.base import TensorSpec
from edge_runtime.decoders.base import Decoder, DecoderParams, dequantize, label_for, select_output
from edge_runtime.decoders.decoded import Classifications, ClassScore
from edge_runtime.errors import ModelMismatchError
from edge_runtime.pipeline.preprocess import FrameTransform

_SUM_TOLERANCE = 0.02


class ClassificationParams(DecoderParams):
    output: int | str = 0
    activation: Literal["auto", "softmax", "sigmoid", "none"] = "auto"
    top_k: int = Field(default=5, ge=1)
    min_score: float = 0.0
    label_offset: int = Field(default=0, ge=0)  # outputs before labels[0], e.g. 1 for a "background" class


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max())
    result: np.ndarray = shifted / shifted.sum()
    return result


def sigmoid(logits: np.ndarray) -> np.ndarray:
    result: np.ndarray = 0.5 * (1.0 + np.tanh(0.5 * logits))  # the logistic function, without exp overflow
    return result


def looks_like_probabilities(values: np.ndarray, quantized: bool) -> bool:
    if values.size == 0 or values.min() < -1e-6 or values.max() > 1.0 + 1e-6:
        return False
    return quantized or abs(float(values.sum()) - 1.0) <= _SUM_TOLERANCE


class ClassificationDecoder(Decoder):
    name = "classification"
    gives = Classifications
    params_type = ClassificationParams

    def __init__(self, params: ClassificationParams, labels: tuple[str, ...]) -> None:
        self.params = params
        self.labels = labels

    def decode(
        self, outputs: Sequence[np.ndarray], specs: Sequence[TensorSpec], transform: FrameTransform | None = None
    ) -> Classifications:
        raw, spec = select_output(outputs, specs, self.params.output, self.name)
        [values] = dequantize([raw], [spec])
        scores = self._scores(self._vector(values), quantized=spec.quantization is not None)
        scores = scores[self.params.label_offset :]
        order = np.argsort(-scores, kind="stable")[: self.params.top_k]
        return Classifications(
            tuple(
                ClassScore(label_for(self.labels, int(i)), float(scores[i]))
                for i in order
                if scores[i] >= self.params.min_score
            )
        )

    def _vector(self, values: np.ndarray) -> np.ndarray:
        if values.ndim == 0 or values.size != values.shape[-1]:
            raise ModelMismatchError(
                f"decoder classification: expected one score vector of shape [1, classes], "
                f"the output has shape {list(values.shape)}"
            )
        vector = values.reshape(-1).astype(np.float32, copy=False)
        expected = len(self.labels) + self.params.label_offset
        if self.labels and vector.size != expected:
            raise ModelMismatchError(
                f"decoder classification: expected {expected} class scores ({len(self.labels)} labels + "
                f"label_offset {self.params.label_offset}), the output has {vector.size}"
            )
        return vector

    def _scores(self, vector: np.ndarray, quantized: bool) -> np.ndarray:
        activation = self.params.activation
        if activation == "auto":
            activation = "none" if looks_like_probabilities(vector, quantized) else "softmax"
        if activation == "softmax":
            return softmax(vector)
        if activation == "sigmoid":
            return sigmoid(vector)
        return vector
