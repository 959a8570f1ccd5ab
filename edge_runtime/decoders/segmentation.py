"""Semantic segmentation: a per-pixel class map becomes the share of the picture each class covers.

Models emit per-class scores ([1, H, W, C] or [1, C, H, W]; the class is the argmax), a ready class-index
map ([1, H, W], usually integers), or one foreground probability per pixel ([1, H, W, 1], as MediaPipe's
selfie segmenter does; the class is 1 where it exceeds `threshold`). Areas are fractions of the part of
the model input the picture fills, so letterbox padding never counts as a class.

With `mask_png` the class-index mask is also warped back onto the source picture (same width and
height; where the model saw a crop, the parts cut away read as class 0) and PNG-encoded: 8-bit for up
to 256 classes, 16-bit beyond.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import cv2
import numpy as np
from pydantic import Field

from edge_runtime.backends.base import TensorSpec
from edge_runtime.decoders.base import Decoder, DecoderParams, dequantize, label_for, select_output
from edge_runtime.decoders.decoded import ClassArea, Segmentation
from edge_runtime.errors import ModelMismatchError
from edge_runtime.pipeline.preprocess import FrameTransform


class SegmentationParams(DecoderParams):
    output: int | str = 0
    layout: Literal["auto", "NHWC", "NCHW", "index"] = "auto"
    threshold: float = 0.5  # for one-channel outputs: the foreground score above which a pixel is class 1
    min_area: float = Field(default=0.0, ge=0.0, le=1.0)
    mask_png: bool = False


class SegmentationDecoder(Decoder):
    name = "segmentation"
    gives = Segmentation
    params_type = SegmentationParams

    def __init__(self, params: SegmentationParams, labels: tuple[str, ...]) -> None:
        self.params = params
        self.labels = labels

    def decode(
        self, outputs: Sequence[np.ndarray], specs: Sequence[TensorSpec], transform: FrameTransform | None = None
    ) -> Segmentation:
        transform = self._need_transform(transform)
        raw, spec = select_output(outputs, specs, self.params.output, self.name)
        [values] = dequantize([raw], [spec])
        index = self.class_map(values)
        areas = self._areas(index, transform)
        classes = tuple(
            ClassArea(label_for(self.labels, int(i)), float(areas[i]))
            for i in np.argsort(-areas, kind="stable")
            if areas[i] > self.params.min_area
        )
        if not self.params.mask_png:
            return Segmentation(classes)
        mask = self._source_mask(index, transform)
        ok, png = cv2.imencode(".png", mask)
        if not ok:
            raise RuntimeError("OpenCV could not encode the segmentation mask as PNG")
        return Segmentation(classes, png.tobytes(), (transform.source_width, transform.source_height))

    def class_map(self, values: np.ndarray) -> np.ndarray:
        """The (H, W) class-index map of one output, as int32."""
        shape = list(values.shape)
        if values.ndim == 4 and values.shape[0] == 1:
            channel_axis = self._channel_axis(values.shape)
            if values.shape[channel_axis] > 1:
                return np.asarray(values[0].argmax(axis=channel_axis - 1), dtype=np.int32)
            values = values.reshape(values.shape[1:3] if channel_axis == 3 else values.shape[2:4])
        elif values.ndim == 3 and values.shape[0] == 1:
            values = values[0]
        if values.ndim != 2:
            raise ModelMismatchError(
                "decoder segmentation: expected [1, H, W, C], [1, C, H, W] or [1, H, W] class scores or "
                f"indices, the output has shape {shape}"
            )
        return self._single_channel(values)

    def _channel_axis(self, shape: tuple[int, ...]) -> int:
        layout = self.params.layout
        if layout == "index":
            if 1 not in (shape[1], shape[3]):
                raise ModelMismatchError(
                    f"decoder segmentation: a class-index map has one channel, the output has shape {list(shape)}"
                )
            return 3 if shape[3] == 1 else 1
        if layout in ("NHWC", "NCHW"):
            axis = 3 if layout == "NHWC" else 1
        elif self.labels and len(self.labels) in (shape[3], shape[1]):
            axis = 3 if shape[3] == len(self.labels) else 1
        else:
            axis = 3 if shape[3] <= shape[1] else 1
        channels = shape[axis]
        if self.labels and channels > 1 and channels != len(self.labels):
            raise ModelMismatchError(
                f"decoder segmentation: expected {len(self.labels)} class channels (one per label) in "
                f"{'NHWC' if axis == 3 else 'NCHW'} order, the output has shape {list(shape)}"
            )
        return axis

    def _single_channel(self, values: np.ndarray) -> np.ndarray:
        """A map that is either class indices already or one foreground score per pixel."""
        integral = np.issubdtype(values.dtype, np.integer) or bool(np.all(values == np.rint(values)))
        if self.params.layout == "index" or integral:
            indices: np.ndarray = np.rint(values).astype(np.int32)
            return indices
        return (values > self.params.threshold).astype(np.int32)

    def _areas(self, index: np.ndarray, transform: FrameTransform) -> np.ndarray:
        """Fraction of the picture each class index covers, padding excluded."""
        height, width = index.shape
        fx, fy = width / transform.input_width, height / transform.input_height
        x0, x1 = _span(transform.offset_x * fx, transform.source_width * transform.scale_x * fx, width)
        y0, y1 = _span(transform.offset_y * fy, transform.source_height * transform.scale_y * fy, height)
        region = index[y0:y1, x0:x1]
        if region.min() < 0:
            raise ModelMismatchError("decoder segmentation: the class-index map holds negative class indices")
        counts = np.bincount(region.ravel(), minlength=len(self.labels))
        return np.asarray(counts / region.size, dtype=np.float64)

    def _source_mask(self, index: np.ndarray, transform: FrameTransform) -> np.ndarray:
        height, width = index.shape
        fx, fy = width / transform.input_width, height / transform.input_height
        to_mask = np.asarray(
            [
                [transform.scale_x * fx, 0.0, (0.5 * transform.scale_x + transform.offset_x) * fx - 0.5],
                [0.0, transform.scale_y * fy, (0.5 * transform.scale_y + transform.offset_y) * fy - 0.5],
            ],
            dtype=np.float64,
        )
        dtype = np.uint8 if int(index.max()) < 256 else np.uint16
        mask: np.ndarray = cv2.warpAffine(
            index.astype(dtype),
            to_mask,
            (transform.source_width, transform.source_height),
            flags=cv2.INTER_NEAREST | cv2.WARP_INVERSE_MAP,
            borderMode=cv2.BORDER_CONSTANT,
            borderValue=0,
        )
        return mask


def _span(start: float, length: float, limit: int) -> tuple[int, int]:
    """The whole-pixel range [begin, end) of a span, clipped to the map and never empty."""
    begin = min(max(round(start), 0), limit - 1)
    end = min(max(round(start + length), begin + 1), limit)
    return begin, end
