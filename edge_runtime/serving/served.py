"""A model as the serving endpoints see it: its queue, its metrics, and how an image becomes a result.

Tensors go through the queue as the client sent them. An image (a JPEG or PNG body, or a BYTES tensor
holding one) is preprocessed as a pipeline would preprocess a camera frame, and its outputs are decoded
and described by the same decoder and result builder, so an HTTP or MQTT answer for a photo is the
message a subscriber of the result topic would have received for it.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from edge_runtime.decoders.base import Decoder
from edge_runtime.pipeline.preprocess import ImagePreprocessor
from edge_runtime.pipeline.results import StageLatency, build_result, model_info, runtime_info
from edge_runtime.placement.model import LoadedModel
from edge_runtime.serving.batching import InferenceQueue
from edge_runtime.serving.metrics import ModelMetrics
from edge_runtime.serving.protocol import ProtocolError

__all__ = ["ServedModel"]


@dataclass
class ServedModel:
    name: str
    model: LoadedModel
    queue: InferenceQueue
    metrics: ModelMetrics
    decoder: Decoder
    device_id: str
    max_batch_size: int
    version: str = "1"
    _images: ImagePreprocessor | None = None
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def takes_images(self) -> bool:
        return self.model.input_specs[0].spatial_size is not None and len(self.model.inputs) == 1

    def image_tensor(self, encoded: bytes) -> tuple[np.ndarray, Any]:
        """The image's model input and its transform back to the image's pixels; ProtocolError if it is no image."""
        if not self.takes_images:
            raise ProtocolError(f"model {self.name} takes no images: send its input tensors")
        frame = cv2.imdecode(np.frombuffer(encoded, np.uint8), cv2.IMREAD_COLOR) if encoded else None
        if frame is None:
            raise ProtocolError("the body is no JPEG or PNG image this server can decode")
        if self._images is None:
            self._images = ImagePreprocessor(self.model.input_specs[0], self.model.inputs[0])
        return self._images(frame)

    def describe(self, outputs: list[np.ndarray], transform: Any, started: float, pre_ms: float) -> dict[str, Any]:
        """The result message for an image's outputs, as the result topic carries it (source: this endpoint)."""
        decode_started = time.perf_counter()
        decoded = self.decoder.decode(outputs, self.model.outputs, transform)
        now = time.time()
        post_ms = (time.perf_counter() - decode_started) * 1000
        total_ms = (time.perf_counter() - started) * 1000
        return build_result(
            device_id=self.device_id,
            pipeline=self.name,
            source="request",
            kind="frame",
            index=next(self._counter),
            captured_at=now - total_ms / 1000,
            published_at=now,
            model=model_info(self.model),
            runtime=runtime_info(self.model),
            latency=StageLatency(pre_ms, total_ms - pre_ms - post_ms, post_ms, total_ms),
            task=self.model.package.manifest.task.value,
            result=decoded.to_dict(),
        )
