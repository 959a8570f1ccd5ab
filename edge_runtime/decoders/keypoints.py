"""Keypoints of one subject (a pose, a hand, a face's landmarks), named by the manifest's labels.

Two output formats exist. Heatmaps ([1, H, W, K] or [1, K, H, W]) hold one map per keypoint; the peak
is the keypoint and its value the score, refined by a quarter pixel towards the higher neighbour as
heatmap decoders usually do. Regressed coordinates ([1, K * V] or [1, ..., K, V]) give V values per
keypoint: x and y (`order: yx` for MoveNet-style outputs) in fractions of the input or in input pixels,
and maybe a score at `score_index` (MoveNet: 2; MediaPipe's pose landmarks: 3, as a logit).
Keypoints are not clipped to the frame: one the model places beyond its edge (in the letterbox padding, or
regressed outside the input) keeps its position with `in_frame` false.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from edge_runtime.backends.base import TensorSpec
from edge_runtime.decoders.base import Decoder, DecoderParams, dequantize, label_for, select_output
from edge_runtime.decoders.classification import sigmoid
from edge_runtime.decoders.decoded import Keypoint, Keypoints
from edge_runtime.errors import ConfigError, ModelMismatchError
from edge_runtime.pipeline.preprocess import FrameTransform


class KeypointParams(DecoderParams):
    format: Literal["heatmap", "coordinates"]
    output: int | str = 0
    layout: Literal["NHWC", "NCHW"] = "NHWC"  # heatmaps only
    num_keypoints: int | None = Field(default=None, ge=1)  # default: one per label
    order: Literal["xy", "yx"] = "xy"  # coordinates only
    coordinates: Literal["normalized", "pixels"] = "normalized"  # coordinates only
    score_index: int | None = Field(default=None, ge=0)  # coordinates only; without it every score is 1
    activation: Literal["none", "sigmoid"] = "none"  # applied to scores
    min_score: float = 0.0  # keypoints scoring below are left out


class KeypointDecoder(Decoder):
    name = "keypoints"
    gives = Keypoints
    params_type = KeypointParams

    def __init__(self, params: KeypointParams, labels: tuple[str, ...]) -> None:
        if labels and params.num_keypoints is not None and params.num_keypoints != len(labels):
            raise ConfigError(
                f"decoder keypoints: decoder.params.num_keypoints is {params.num_keypoints} but the "
                f"manifest has {len(labels)} labels (one name per keypoint)"
            )
        self.params = params
        self.labels = labels
        self.count = params.num_keypoints or len(labels) or None

    def decode(
        self, outputs: Sequence[np.ndarray], specs: Sequence[TensorSpec], transform: FrameTransform | None = None
    ) -> Keypoints:
        transform = self._need_transform(transform)
        raw, spec = select_output(outputs, specs, self.params.output, self.name)
        [values] = dequantize([raw], [spec])
        values = values.astype(np.float32, copy=False)
        if self.params.format == "heatmap":
            x, y, scores = self._from_heatmaps(values)
        else:
            x, y, scores = self._from_coordinates(values, transform)
        if self.params.activation == "sigmoid":
            scores = sigmoid(scores)
        xs, ys = transform.to_source(x, y)
        on_frame = transform.in_frame(xs, ys)
        return Keypoints(
            tuple(
                Keypoint(label_for(self.labels, k), float(xs[k]), float(ys[k]), float(scores[k]), bool(on_frame[k]))
                for k in range(len(scores))
                if scores[k] >= self.params.min_score
            )
        )

    def _from_heatmaps(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Normalised x, y and the score of each heatmap's peak."""
        if values.ndim != 4 or values.shape[0] != 1:
            raise ModelMismatchError(
                f"decoder keypoints: expected heatmaps [1, H, W, K] or [1, K, H, W], "
                f"the output has shape {list(values.shape)}"
            )
        maps = values[0].transpose(2, 0, 1) if self.params.layout == "NHWC" else values[0]
        count, height, width = maps.shape
        if self.count is not None and count != self.count:
            raise ModelMismatchError(
                f"decoder keypoints: expected {self.count} heatmaps ({self.params.layout}), "
                f"the output has shape {list(values.shape)}"
            )
        flat = maps.reshape(count, -1)
        peak = flat.argmax(axis=1)
        rows, cols = np.divmod(peak, width)
        scores = flat[np.arange(count), peak]
        dx = _refinement(maps, rows, cols, axis=1)
        dy = _refinement(maps, rows, cols, axis=0)
        return (cols + 0.5 + dx) / width, (rows + 0.5 + dy) / height, scores

    def _from_coordinates(
        self, values: np.ndarray, transform: FrameTransform
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        count = self.count or (values.size // values.shape[-1] if values.ndim >= 3 else None)
        if count is None:
            raise ConfigError(
                "decoder keypoints: decoder.params.num_keypoints is needed (or one label per keypoint) "
                f"to split a flat output of shape {list(values.shape)}"
            )
        per_point, remainder = divmod(values.size, count)
        needed = max(2, (self.params.score_index or 0) + 1)
        if remainder or per_point < needed:
            raise ModelMismatchError(
                f"decoder keypoints: expected {count} keypoints with at least {needed} values each, "
                f"the output has shape {list(values.shape)}"
            )
        table = values.reshape(count, per_point)
        x, y = (table[:, 0], table[:, 1]) if self.params.order == "xy" else (table[:, 1], table[:, 0])
        if self.params.coordinates == "pixels":
            x, y = x / transform.input_width, y / transform.input_height
        index = self.params.score_index
        scores = table[:, index] if index is not None else np.ones(count, np.float32)
        return x, y, scores


def _refinement(maps: np.ndarray, rows: np.ndarray, cols: np.ndarray, axis: int) -> np.ndarray:
    """A quarter pixel towards the higher neighbour of each peak along one axis (0: y, 1: x)."""
    count, height, width = maps.shape
    limit = width if axis == 1 else height
    position = cols if axis == 1 else rows
    before, after = np.maximum(position - 1, 0), np.minimum(position + 1, limit - 1)
    k = np.arange(count)
    if axis == 1:
        difference = maps[k, rows, after] - maps[k, rows, before]
    else:
        difference = maps[k, after, cols] - maps[k, before, cols]
    inside = (position > 0) & (position < limit - 1)
    result: np.ndarray = np.where(inside, 0.25 * np.sign(difference), 0.0)
    return result
