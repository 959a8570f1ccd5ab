"""Preprocessing: a camera frame becomes the tensor a model expects.

The manifest's input spec says how (resize mode, colour order, layout, normalisation); the loaded
variant's tensor spec says the dtype and, for quantized variants, the scale and zero point. Each
frame also yields the `FrameTransform` that maps model coordinates back to source pixels, so boxes
are reported where they are in the picture the camera took.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import cv2
import numpy as np

from edge_runtime.backends.base import TensorSpec
from edge_runtime.errors import ConfigError
from edge_runtime.package.manifest import InputSpec

IN_FRAME_MARGIN = 0.05  # source pixels: half the 0.1 px that result messages round positions to


@dataclass(frozen=True)
class FrameTransform:
    """Maps normalised model coordinates (0..1 of the model input) back to source-image pixels."""

    source_width: int
    source_height: int
    scale_x: float  # model-input pixels per source pixel
    scale_y: float
    offset_x: float  # model-input pixels added before the image (letterbox padding, negative for crop)
    offset_y: float
    input_width: int
    input_height: int

    def to_source(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Normalised model coordinates → source pixels, where they truly are: a point the model places in the
        letterbox padding, or beyond the input's edge, lies outside the frame (below 0 or past its size)."""
        sx = (x * self.input_width - self.offset_x) / self.scale_x
        sy = (y * self.input_height - self.offset_y) / self.scale_y
        return sx, sy

    def to_source_clipped(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Normalised model coordinates → source pixels, clipped to the frame: for box corners, so that a box
        reaching past the frame's edge ends at it and stays a region of the picture."""
        sx, sy = self.to_source(x, y)
        return np.clip(sx, 0, self.source_width), np.clip(sy, 0, self.source_height)

    def in_frame(self, sx: np.ndarray, sy: np.ndarray) -> np.ndarray:
        """Which source-pixel points lie on the frame, its edges included, within half the 0.1 px that result
        messages round positions to: a point published on the edge is on the frame."""
        margin = IN_FRAME_MARGIN
        across = (sx >= -margin) & (sx <= self.source_width + margin)
        inside: np.ndarray = across & (sy >= -margin) & (sy <= self.source_height + margin)
        return inside


class Preprocessor(Protocol):
    """Raw input (a BGR frame, or a window of sensor samples) → the model's input tensor and, for frames, the
    transform back to source pixels (None for windows)."""

    def __call__(self, data: np.ndarray, /) -> tuple[np.ndarray, FrameTransform | None]: ...


def preprocessor_for(spec: InputSpec, tensor: TensorSpec) -> Preprocessor:
    """Image preprocessing for inputs with a spatial size, window preprocessing for the others."""
    return ImagePreprocessor(spec, tensor) if spec.spatial_size else WindowPreprocessor(spec, tensor)


class ImagePreprocessor:
    """Turns BGR uint8 frames (as OpenCV captures them) into one model input tensor.

    Everything that does not depend on the frame (target size, colour handling, normalisation
    constants tiled to a whole row, quantization) is computed once here. Per frame there is a resize
    and one fused affine map written straight into the model's layout: float inputs are scaled into a
    fresh buffer with `out=`, so no intermediate image is allocated, and an NCHW model reads each
    channel from the frame in the order it wants, so the colour swap costs nothing.
    """

    def __init__(self, spec: InputSpec, tensor: TensorSpec):
        size = spec.spatial_size
        if size is None:
            raise ConfigError(f"input {tensor.name}: image preprocessing needs an NHWC or NCHW 4-D shape")
        self.spec = spec
        self.tensor = tensor
        self.height, self.width = size
        self.channels = spec.channels or 3
        self._colour = _colour_order(spec, tensor.name, self.channels)
        mean = np.broadcast_to(np.asarray(spec.mean or (0.0,), np.float32), (self.channels,))
        std = np.broadcast_to(np.asarray(spec.std or (1.0,), np.float32), (self.channels,))
        scale, offset = 1.0 / std, -mean / std
        if tensor.quantization is not None:
            q = tensor.quantization
            scale, offset = scale / q.scale, offset / q.scale + q.zero_point
        self._scale = scale.astype(np.float32)
        self._offset = offset.astype(np.float32)
        self._row_scale = np.tile(self._scale, self.width)  # one NHWC row: scale per pixel and channel
        self._row_offset = np.tile(self._offset, self.width)
        self._identity = bool(np.all(self._scale == 1.0) and np.all(self._offset == 0.0))
        self._uniform = bool(np.all(self._scale == self._scale[0]) and np.all(self._offset == self._offset[0]))
        self._dtype = np.dtype(tensor.dtype)
        self._integer = np.issubdtype(self._dtype, np.integer)
        # BGR frame channel feeding each model channel, when the colour order is a pure permutation
        self._source_channel = (2, 1, 0) if self._colour == "RGB" else (0, 1, 2)
        self._border = _border_bgr(spec.pad_values, self._colour)

    def __call__(self, frame_bgr: np.ndarray, /) -> tuple[np.ndarray, FrameTransform]:
        image, transform = self._fit(frame_bgr)
        if self._colour == "GRAY":
            image = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)[..., np.newaxis]
        if self._dtype == np.float32 and not self._identity:
            return self._to_float(image), transform
        if self._colour == "RGB":
            image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        tensor = self._normalise(image)
        if self.spec.layout == "NCHW":
            tensor = tensor.transpose(2, 0, 1)
        return np.ascontiguousarray(tensor[np.newaxis]), transform

    def _fit(self, frame: np.ndarray) -> tuple[np.ndarray, FrameTransform]:
        src_h, src_w = frame.shape[:2]
        if self.spec.resize == "stretch":
            sx, sy = self.width / src_w, self.height / src_h
            resized = _resize(frame, self.width, self.height)
            return resized, FrameTransform(src_w, src_h, sx, sy, 0.0, 0.0, self.width, self.height)
        fit = min if self.spec.resize == "letterbox" else max
        scale = fit(self.width / src_w, self.height / src_h)
        new_w, new_h = max(1, round(src_w * scale)), max(1, round(src_h * scale))
        resized = _resize(frame, new_w, new_h)
        off_x, off_y = (self.width - new_w) // 2, (self.height - new_h) // 2
        if self.spec.resize == "letterbox":
            bottom, right = self.height - new_h - off_y, self.width - new_w - off_x
            border = self._border if frame.shape[2] == len(self._border) else self._border[:1] * frame.shape[2]
            canvas = cv2.copyMakeBorder(resized, off_y, bottom, off_x, right, cv2.BORDER_CONSTANT, value=border)
            canvas = canvas.reshape(self.height, self.width, frame.shape[2])
        else:
            canvas = resized[-off_y : -off_y + self.height, -off_x : -off_x + self.width]
        # the picture's real scale on each axis: its sides were rounded to whole pixels (451 x 300 into 320 x 320 gives
        # 320 x 213, 0.7095 across and 0.7100 down), as Ultralytics maps its boxes back too
        scale_x, scale_y = new_w / src_w, new_h / src_h
        return canvas, FrameTransform(src_w, src_h, scale_x, scale_y, off_x, off_y, self.width, self.height)

    def _to_float(self, image: np.ndarray) -> np.ndarray:
        """`image * scale + offset` in float32, computed straight into a tensor in the model's layout.

        OpenCV's `addWeighted` does the multiply, the add and the conversion in one pass (about twice
        as fast as numpy's two); it takes one scale per call, so an NCHW tensor is filled plane by plane
        and an NHWC tensor in one call when every channel has the same scale and offset.
        """
        if self.spec.layout == "NCHW":
            tensor = np.empty((1, self.channels, self.height, self.width), np.float32)
            planes = cv2.split(image) if self.channels == 3 else [image.reshape(self.height, self.width)]
            for channel in range(self.channels):
                source = planes[self._source_channel[channel] if self.channels == 3 else 0]
                _affine(source, float(self._scale[channel]), float(self._offset[channel]), tensor[0, channel])
            return tensor
        if self._colour == "RGB":
            image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        tensor = np.empty((1, self.height, self.width, self.channels), np.float32)
        rows = tensor.reshape(self.height, self.width * self.channels)
        pixels = image.reshape(self.height, self.width * self.channels)
        if self._uniform:
            _affine(pixels, float(self._scale[0]), float(self._offset[0]), rows)
        else:
            np.multiply(pixels, self._row_scale, out=rows)
            np.add(rows, self._row_offset, out=rows)
        return tensor

    def _normalise(self, image: np.ndarray) -> np.ndarray:
        if self._identity and image.dtype == self._dtype:
            return image
        values = image.astype(np.float32) * self._scale + self._offset
        if self._integer:
            info = np.iinfo(self._dtype)
            values = np.clip(np.rint(values), info.min, info.max)
        return values.astype(self._dtype, copy=False)


def _affine(source: np.ndarray, scale: float, offset: float, out: np.ndarray) -> None:
    """`out = source * scale + offset` as float32, for 2-D uint8 `source` and contiguous `out`."""
    cv2.addWeighted(source, scale, source, 0.0, offset, dst=out, dtype=cv2.CV_32F)


def _resize(frame: np.ndarray, width: int, height: int) -> np.ndarray:
    if frame.shape[1] == width and frame.shape[0] == height:
        return frame
    return cv2.resize(frame, (width, height), interpolation=cv2.INTER_LINEAR)


def _border_bgr(pad_values: tuple[int, ...], colour: str) -> tuple[int, ...]:
    """The letterbox border as a BGR frame pixel: the spec gives it in the model's colour order, and the border
    is drawn before the colour swap, so an RGB model's (R, G, B) is reversed here."""
    if len(pad_values) == 1:
        return pad_values * 3
    return tuple(reversed(pad_values)) if colour == "RGB" else pad_values


def _colour_order(spec: InputSpec, name: str, channels: int) -> str:
    """The colour order to produce: a one-channel model gets grey unless the manifest says otherwise."""
    order = spec.color_order or ("GRAY" if channels == 1 else "BGR")
    produced = 1 if order == "GRAY" else 3
    if produced != channels:
        raise ConfigError(
            f"input {name}: color_order {order} gives {produced} channel(s), the model takes {channels}; "
            "set color_order to GRAY for one channel, RGB or BGR for three"
        )
    return order


class WindowPreprocessor:
    """Turns a window of sensor samples (length x channels, float32) into the model's input tensor.

    The manifest's layout says where time goes: NTC (batch, time, channels), NCT (batch, channels,
    time) or NC (batch, length * channels, flattened oldest first). Normalisation and quantization work
    per channel as for images.
    """

    def __init__(self, spec: InputSpec, tensor: TensorSpec):
        if spec.layout not in ("NTC", "NCT", "NC"):
            raise ConfigError(f"input {tensor.name}: sensor windows need layout NTC, NCT or NC, not {spec.layout}")
        self.spec = spec
        self.tensor = tensor
        channels = spec.shape[2] if spec.layout == "NTC" else spec.shape[1] if spec.layout == "NCT" else 1
        mean = np.asarray(spec.mean or (0.0,), np.float32)
        std = np.asarray(spec.std or (1.0,), np.float32)
        scale, offset = 1.0 / std, -mean / std
        if tensor.quantization is not None:
            q = tensor.quantization
            scale, offset = scale / q.scale, offset / q.scale + q.zero_point
        self._scale = np.broadcast_to(scale, (channels,)) if spec.layout != "NC" else scale
        self._offset = np.broadcast_to(offset, (channels,)) if spec.layout != "NC" else offset
        self._dtype = np.dtype(tensor.dtype)

    def __call__(self, samples: np.ndarray, /) -> tuple[np.ndarray, None]:
        """The window as the model's input tensor; no transform, since a window has no pixels to map back."""
        values = samples.astype(np.float32) * self._scale + self._offset
        if np.issubdtype(self._dtype, np.integer):
            info = np.iinfo(self._dtype)
            values = np.clip(np.rint(values), info.min, info.max)
        if self.spec.layout == "NCT":
            values = values.T
        elif self.spec.layout == "NC":
            values = values.reshape(-1)
        tensor = np.ascontiguousarray(values[np.newaxis], dtype=self._dtype)
        if tensor.shape != self.spec.shape:
            raise ConfigError(
                f"input {self.tensor.name}: a window gives shape {list(tensor.shape)}, the model takes "
                f"{list(self.spec.shape)}; set the source's window length and channels to match"
            )
        return tensor, None
