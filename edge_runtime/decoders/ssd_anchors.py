"""SSD-style boxes regressed against a grid of anchors, as MediaPipe's BlazeFace and BlazePose emit.

The anchors follow MediaPipe's SSD anchor layout (layers of feature maps with per-layer strides and
an interpolated extra scale), computed once per decoder. Scores go through a clipped sigmoid; boxes
and keypoints are decoded relative to their anchor, then suppressed with OpenCV's NMS.

Keypoints are named by `keypoint_names`, in the model's order (BlazeFace: right eye, left eye, nose tip,
mouth center, right ear tragion, left ear tragion, the subject's right and left); without names a keypoint
is called by its index, "0", "1", ... Boxes are clipped to the frame; keypoints keep their true position
and say whether it is on the frame (see `Landmark`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np
from pydantic import Field

from edge_runtime.backends.base import TensorSpec
from edge_runtime.decoders.base import (
    Decoder,
    DecoderParams,
    Detection,
    Detections,
    Landmark,
    dequantize,
    label_for,
)
from edge_runtime.errors import ConfigError, ModelMismatchError
from edge_runtime.pipeline.preprocess import FrameTransform


class SsdAnchorParams(DecoderParams):
    num_layers: int = Field(ge=1)
    strides: list[int] = Field(min_length=1)
    min_scale: float
    max_scale: float
    anchor_offset: float = 0.5
    aspect_ratios: list[float] = Field(default_factory=lambda: [1.0])
    interpolated_scale_aspect_ratio: float = 1.0
    fixed_anchor_size: bool = True
    input_size: tuple[int, int] | None = None  # (height, width); default: the model input
    box_scale: float = Field(gt=0)
    num_keypoints: int = Field(default=0, ge=0)  # default: one per name in keypoint_names
    keypoint_names: list[str] | None = Field(default=None, min_length=1)  # one per keypoint, in the model's order
    score_clip: float = 100.0
    min_score: float = Field(default=0.5, ge=0.0, le=1.0)
    iou_threshold: float = Field(default=0.3, ge=0.0, le=1.0)
    max_detections: int = Field(default=100, ge=1)


def _layer_scale(params: SsdAnchorParams, layer: int) -> float:
    if len(params.strides) == 1:
        return (params.min_scale + params.max_scale) / 2
    return params.min_scale + (params.max_scale - params.min_scale) * layer / (len(params.strides) - 1)


def generate_anchors(params: SsdAnchorParams, height: int, width: int) -> np.ndarray:
    """Anchors as rows (x_center, y_center, width, height), normalised, in the model's output order."""
    rows: list[tuple[float, float, float, float]] = []
    layer = 0
    while layer < params.num_layers:
        sizes: list[tuple[float, float]] = []
        last = layer
        while last < params.num_layers and params.strides[last] == params.strides[layer]:
            scale = _layer_scale(params, last)
            for ratio in params.aspect_ratios:
                sizes.append((scale * math.sqrt(ratio), scale / math.sqrt(ratio)))
            if params.interpolated_scale_aspect_ratio > 0:
                next_scale = 1.0 if last == params.num_layers - 1 else _layer_scale(params, last + 1)
                interpolated = math.sqrt(scale * next_scale)
                ratio = params.interpolated_scale_aspect_ratio
                sizes.append((interpolated * math.sqrt(ratio), interpolated / math.sqrt(ratio)))
            last += 1
        stride = params.strides[layer]
        rows_count, cols_count = math.ceil(height / stride), math.ceil(width / stride)
        for y in range(rows_count):
            for x in range(cols_count):
                cx = (x + params.anchor_offset) / cols_count
                cy = (y + params.anchor_offset) / rows_count
                for w, h in sizes:
                    rows.append((cx, cy, 1.0, 1.0) if params.fixed_anchor_size else (cx, cy, w, h))
        layer = last
    return np.asarray(rows, dtype=np.float32)


class SsdAnchorDecoder(Decoder):
    name = "ssd_anchors"
    gives = Detections
    params_type = SsdAnchorParams

    def __init__(self, params: SsdAnchorParams, labels: tuple[str, ...]) -> None:
        names = params.keypoint_names
        if names is not None and params.num_keypoints not in (0, len(names)):
            raise ConfigError(
                f"decoder ssd_anchors: decoder.params.num_keypoints is {params.num_keypoints} but "
                f"decoder.params.keypoint_names has {len(names)} names (one per keypoint)"
            )
        if names is not None and len(set(names)) != len(names):
            raise ConfigError(f"decoder ssd_anchors: decoder.params.keypoint_names names a keypoint twice: {names}")
        self.params = params
        self.labels = labels
        self.keypoint_count = params.num_keypoints or len(names or ())
        self.keypoint_names = tuple(label_for(names or (), k) for k in range(self.keypoint_count))
        self._anchors: np.ndarray | None = None
        self._min_logit = _logit(params.min_score)

    def decode(
        self, outputs: Sequence[np.ndarray], specs: Sequence[TensorSpec], transform: FrameTransform | None = None
    ) -> Detections:
        transform = self._need_transform(transform)
        boxes_raw, scores_raw = self._split(dequantize(outputs, specs))
        anchors = self._anchors_for(transform, len(boxes_raw))
        keep, scores, classes = self._candidates(scores_raw)
        if keep.size == 0:
            return Detections()
        decoded = self._decode_boxes(boxes_raw[keep], anchors[keep])
        xywh = np.concatenate([decoded[:, 0:2], decoded[:, 2:4] - decoded[:, 0:2]], axis=1)
        chosen = cv2.dnn.NMSBoxes(xywh.tolist(), scores.tolist(), self.params.min_score, self.params.iou_threshold)
        return Detections(
            tuple(
                self._detection(decoded[i], scores[i], int(classes[i]), transform)
                for i in np.asarray(chosen).reshape(-1)[: self.params.max_detections]
            )
        )

    def _candidates(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Anchors whose best class clears `min_score`: their indices, sigmoid scores and classes.

        The sigmoid is monotonic, so the raw scores are thresholded first and only the few survivors
        are turned into probabilities.
        """
        classes = raw.argmax(axis=1) if raw.shape[1] > 1 else np.zeros(len(raw), np.intp)
        best = raw[:, 0] if raw.shape[1] == 1 else raw[np.arange(len(classes)), classes]
        clipped = np.minimum(np.maximum(best, -self.params.score_clip), self.params.score_clip)
        keep = np.flatnonzero(clipped >= self._min_logit)
        scores = 0.5 * (1.0 + np.tanh(0.5 * clipped[keep]))  # the logistic sigmoid, without exp overflow
        passed = scores >= self.params.min_score
        return keep[passed], scores[passed], classes[keep[passed]]

    def _split(self, outputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        if len(outputs) < 2:
            raise ModelMismatchError("decoder ssd_anchors needs two outputs (box regressors and class scores)")
        first, second = (o.reshape(-1, o.shape[-1]) for o in outputs[:2])
        boxes, scores = (first, second) if first.shape[1] > second.shape[1] else (second, first)
        if boxes.shape[1] < 4 + 2 * self.keypoint_count:
            raise ModelMismatchError(
                f"decoder ssd_anchors: box output has {boxes.shape[1]} values per anchor, "
                f"expected at least {4 + 2 * self.keypoint_count}"
            )
        return boxes, scores

    def _anchors_for(self, transform: FrameTransform, count: int) -> np.ndarray:
        if self._anchors is None:
            height, width = self.params.input_size or (transform.input_height, transform.input_width)
            self._anchors = generate_anchors(self.params, height, width)
        if len(self._anchors) != count:
            raise ModelMismatchError(
                f"decoder ssd_anchors: the parameters give {len(self._anchors)} anchors, the model outputs {count}"
            )
        return self._anchors

    def _decode_boxes(self, raw: np.ndarray, anchors: np.ndarray) -> np.ndarray:
        """Rows of (x_min, y_min, x_max, y_max, kp0x, kp0y, ...) in normalised model coordinates."""
        count, keypoints = len(raw), self.keypoint_count
        scaled = raw[:, : 4 + 2 * keypoints] / self.params.box_scale
        centre = scaled[:, 0:2] * anchors[:, 2:4] + anchors[:, 0:2]
        size = scaled[:, 2:4] * anchors[:, 2:4]
        points = scaled[:, 4:].reshape(count, keypoints, 2) * anchors[:, np.newaxis, 2:4] + anchors[:, np.newaxis, 0:2]
        return np.concatenate([centre - size / 2, centre + size / 2, points.reshape(count, -1)], axis=1)

    def _detection(self, row: np.ndarray, score: float, cls: int, transform: FrameTransform) -> Detection:
        box_x, box_y = transform.to_source_clipped(row[0:4:2], row[1:4:2])
        xs, ys = transform.to_source(row[4::2], row[5::2])
        on_frame = transform.in_frame(xs, ys)
        return Detection(
            label=label_for(self.labels, cls),
            score=float(score),
            box=(float(box_x[0]), float(box_y[0]), float(box_x[1]), float(box_y[1])),
            keypoints=tuple(
                Landmark(name, float(x), float(y), bool(inside))
                for name, x, y, inside in zip(self.keypoint_names, xs, ys, on_frame, strict=True)
            ),
        )


DECODER = SsdAnchorDecoder


def _logit(probability: float) -> float:
    """The raw score whose sigmoid is `probability`, slightly lowered so rounding never drops a box."""
    if probability <= 0.0:
        return -math.inf
    if probability >= 1.0:
        return math.inf
    return math.log(probability / (1.0 - probability)) - 1e-6
