"""A model as the serving endpoints see it: its queue, its metrics, and how a request becomes an answer.

Every transport (HTTP, MQTT) does the same three steps: `prepare` a request body into the model's
inputs, put them through the queue, and `respond` with the outputs. Tensors go through as the client
sent them. An image (a JPEG or PNG body, or a BYTES tensor holding one) is preprocessed as a pipeline
would preprocess a camera frame, and its outputs are decoded and described by the same decoder and
result builder, so the answer for a photo is the message a subscriber of the result topic would have
received for it.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge_runtime.decoders.base import Decoder
from edge_runtime.pipeline.preprocess import FrameTransform, ImagePreprocessor
from edge_runtime.pipeline.results import FrameSize, StageLatency, build_result, model_info, runtime_info
from edge_runtime.placement.model import LoadedModel
from edge_runtime.serving.batch_choice import BatchChoice
from edge_runtime.serving.batching import InferenceQueue, QueueFull, RequestTimedOut
from edge_runtime.serving.metrics import ModelMetrics
from edge_runtime.serving.protocol import (
    IMAGE_TYPES,
    InferRequest,
    ProtocolError,
    RequestBody,
    encode_response,
    parse_request,
    split_request,
)
from edge_runtime.sources.configs import DEFAULT_MAX_IMAGE_PIXELS
from edge_runtime.sources.encoded import ImageError, decode_image

__all__ = ["Prepared", "ServedModel", "refusal"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """A request ready for the queue: the model's inputs, and what answering it needs."""

    inputs: list[np.ndarray]
    request: InferRequest | None = None  # tensor requests
    transform: FrameTransform | None = None  # image requests: back to the image's pixels
    started: float = 0.0  # perf_counter at arrival, for the result message's latency
    pre_ms: float = 0.0

    @property
    def timeout_ms(self) -> float | None:
        """The request's own `timeout` parameter (microseconds, as Triton takes it), in milliseconds."""
        timeout = self.request.parameters.get("timeout") if self.request is not None else None
        return float(timeout) / 1000 if isinstance(timeout, (int, float)) and timeout > 0 else None


def refusal(model: str, error: BaseException) -> tuple[int, str]:
    """The HTTP status and message an error of the serving path is answered with (MQTT replies carry both)."""
    if isinstance(error, ProtocolError):
        return error.status, error.message
    if isinstance(error, QueueFull):
        return 503, str(error)
    if isinstance(error, RequestTimedOut):
        return 504, str(error)
    log.warning("model %s: inference failed: %s", model, error)
    return 500, f"model {model}: inference failed: {error}"


@dataclass
class ServedModel:
    name: str
    model: LoadedModel
    queue: InferenceQueue
    metrics: ModelMetrics
    decoder: Decoder
    device_id: str
    batching: BatchChoice
    version: str = "1"
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    _images: ImagePreprocessor | None = None
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def max_batch_size(self) -> int:
        """0 where requests are not joined into batches."""
        return self.batching.max_batch_size

    def prepare(self, body: bytes | bytearray | memoryview, content_type: str, header_length: int | None) -> Prepared:
        """The request in `body` as model inputs; ProtocolError naming what does not fit.

        Tensors sent as binary data are read from `body`'s own memory: from a writable buffer, as the HTTP
        endpoint reads a body, they reach the backend without being copied."""
        started = time.perf_counter()
        try:
            return self._prepare(body, content_type, header_length)
        finally:
            self.metrics.prepared((time.perf_counter() - started) * 1000)

    def respond(self, prepared: Prepared, outputs: list[np.ndarray]) -> tuple[bytes, dict[str, str]]:
        """The answer's body and headers: the outputs as the protocol encodes them, or an image's result message."""
        started = time.perf_counter()
        try:
            return self._respond(prepared, outputs)
        finally:
            self.metrics.responded((time.perf_counter() - started) * 1000)

    def _prepare(self, body: bytes | bytearray | memoryview, content_type: str, header_length: int | None) -> Prepared:
        if content_type in IMAGE_TYPES:
            return self._prepare_image(body)
        split = split_request(body, header_length)
        image = _bytes_input(split, header_length is not None)
        if image is not None:
            return self._prepare_image(image)
        request = parse_request(split, self.model.inputs, self.max_batch_size)
        output_names = [t.name for t in self.model.outputs]
        unknown = [name for name in request.outputs or () if name not in output_names]
        if unknown:
            raise ProtocolError(f"unknown output {unknown[0]!r}; the model gives {', '.join(output_names)}")
        return Prepared([request.inputs[t.name] for t in self.model.inputs], request)

    def _respond(self, prepared: Prepared, outputs: list[np.ndarray]) -> tuple[bytes, dict[str, str]]:
        if prepared.request is not None:
            named = dict(zip((t.name for t in self.model.outputs), outputs, strict=True))
            return encode_response(self.name, self.version, prepared.request, named)
        assert prepared.transform is not None  # a request without tensors is an image's
        message = self.describe(outputs, prepared.transform, prepared.started, prepared.pre_ms)
        return json.dumps(message, separators=(",", ":")).encode(), {"Content-Type": "application/json"}

    def _prepare_image(self, image: bytes | bytearray | memoryview) -> Prepared:
        started = time.perf_counter()
        tensor, transform = self.image_tensor(image)
        return Prepared([tensor], None, transform, started, (time.perf_counter() - started) * 1000)

    @property
    def takes_images(self) -> bool:
        return self.model.input_specs[0].spatial_size is not None and len(self.model.inputs) == 1

    def image_tensor(self, encoded: bytes | bytearray | memoryview) -> tuple[np.ndarray, FrameTransform]:
        """The image's model input and its transform back to the image's pixels; ProtocolError if it is no image."""
        if not self.takes_images:
            raise ProtocolError(f"model {self.name} takes no images: send its input tensors")
        try:
            frame = decode_image(encoded, self.max_image_pixels, "the request's image")
        except ImageError as error:
            raise ProtocolError(str(error), 413 if error.reason == "size" else 400) from None
        if self._images is None:
            self._images = ImagePreprocessor(self.model.input_specs[0], self.model.inputs[0])
        return self._images(frame)

    def describe(
        self, outputs: list[np.ndarray], transform: FrameTransform, started: float, pre_ms: float
    ) -> dict[str, Any]:
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
            frame=FrameSize(transform.source_width, transform.source_height),
            captured_at=now - total_ms / 1000,
            published_at=now,
            model=model_info(self.model),
            runtime=runtime_info(self.model),
            latency=StageLatency(pre_ms, total_ms - pre_ms - post_ms, post_ms, total_ms),
            task=self.model.package.manifest.task.value,
            result=decoded.to_dict(),
        )


def _bytes_input(body: RequestBody, binary_follows: bool) -> bytes | None:
    """The image in a request whose only input is a BYTES tensor of one element; None for other requests."""
    inputs = body.document.get("inputs")
    if not (isinstance(inputs, list) and len(inputs) == 1 and isinstance(inputs[0], dict)):
        return None
    tensor = inputs[0]
    if tensor.get("datatype") != "BYTES":
        return None
    if tensor.get("shape") not in ([1], [1, 1]):
        raise ProtocolError("a BYTES input holds one image: its shape must be [1]")
    size = (tensor.get("parameters") or {}).get("binary_data_size")
    if binary_follows and isinstance(size, int):
        element = bytes(body.binary)
        if size != len(element) or len(element) < 4:
            raise ProtocolError(f"the BYTES input declares {size} bytes, the body has {len(element)}")
        length = int.from_bytes(element[:4], "little")
        if length != len(element) - 4:
            raise ProtocolError(f"the BYTES element says {length} bytes, {len(element) - 4} follow")
        return element[4:]
    data = tensor.get("data")
    value = data[0] if isinstance(data, list) and len(data) == 1 else None
    if not isinstance(value, str):
        raise ProtocolError("a BYTES input in JSON holds its image as one base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise ProtocolError("the BYTES input is not valid base64") from None
