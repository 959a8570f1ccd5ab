"""One pipeline: source → preprocess → infer → postprocess → publish, with the stages overlapping.

Three threads of work meet here. The feed thread pulls items from the source, preprocesses them and
submits them to the backend's async runner, which blocks while the runner is full: that is the
backpressure that makes a live camera drop stale frames at the source instead of queueing them.
The runner hands each finished request's outputs to a bounded post queue, from a thread of its own
(OpenVINO's completion thread, LiteRT's and ONNX Runtime's worker threads). The post
thread decodes, builds the result message and gives it to the publisher, which spools it to disk
before anything can be lost.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import cv2
import numpy as np

from edge_runtime.backends.base import AsyncRunner, Outputs
from edge_runtime.decoders.base import Decoder
from edge_runtime.decoders.decoded import Decoded, Segmentation
from edge_runtime.package.manifest import InputSpec
from edge_runtime.pipeline.preprocess import FrameTransform, ImagePreprocessor, WindowPreprocessor
from edge_runtime.pipeline.results import ModelInfo, RuntimeInfo, StageLatency, build_result, encode, result_topic
from edge_runtime.placement.model import LoadedModel
from edge_runtime.service.stats import PipelineStats
from edge_runtime.sources.base import EndOfSource, Frame, Item, Source

log = logging.getLogger(__name__)

_IDENTITY = FrameTransform(1, 1, 1.0, 1.0, 0.0, 0.0, 1, 1)


class ResultSink(Protocol):
    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> None: ...


@dataclass(frozen=True)
class PublishPolicy:
    qos: int = 1
    retain: bool = False
    only_on_change: bool = False
    min_score: float | None = None
    snapshot_interval_s: float | None = None  # None: no snapshots
    jpeg_quality: int = 80


@dataclass
class _Job:
    item: Item
    transform: FrameTransform
    submitted: float  # perf_counter
    pre_ms: float


class Pipeline:
    def __init__(
        self,
        *,
        name: str,
        device_id: str,
        topic_prefix: str,
        source: Source,
        model: LoadedModel,
        decoder: Decoder,
        input_spec: InputSpec,
        policy: PublishPolicy,
        sink: ResultSink,
        max_in_flight: int | None = None,
        on_progress: Callable[[str], None] | None = None,
        on_waiting: Callable[[str, str], None] | None = None,
    ) -> None:
        self.name = name
        self.device_id = device_id
        self.source = source
        self.model = model
        self.decoder = decoder
        self.policy = policy
        self.sink = sink
        self.stats = PipelineStats(name)
        self.finished = threading.Event()
        self._on_progress = on_progress or (lambda _name: None)
        self._on_waiting = on_waiting or (lambda _name, _reason: None)
        self._topic = result_topic(topic_prefix, device_id, name)
        self._snapshot_topic = f"{topic_prefix}/{device_id}/{name}/snapshot"
        self._mask_topic = f"{topic_prefix}/{device_id}/{name}/mask"
        self._max_in_flight = max_in_flight
        tensor = model.inputs[0]
        self._preprocess: Callable[[Any], Any] = (
            ImagePreprocessor(input_spec, tensor) if input_spec.spatial_size else WindowPreprocessor(input_spec, tensor)
        )
        self._model_info = _model_info(model)
        self._runtime = RuntimeInfo(
            model.backend.runs_on.backend, model.backend.runs_on.device, model.backend.runs_on.precision
        )
        self._task = model.package.manifest.task.value
        self._post_queue: queue.Queue[tuple[_Job, Outputs | None, BaseException | None] | None] = queue.Queue(64)
        self._stop = threading.Event()
        self._last_signature: object = None
        self._last_snapshot = 0.0
        self._runner: AsyncRunner | None = None
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._runner = self.model.backend.async_runner(self._on_inferred, self._max_in_flight)
        self.source.start()
        self._threads = [
            threading.Thread(target=self._feed, name=f"feed-{self.name}", daemon=True),
            threading.Thread(target=self._post, name=f"post-{self.name}", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking input, finish what is in flight, and hand every result to the sink."""
        self._stop.set()
        self.source.close()
        self._threads[0].join(timeout)
        if self._runner is not None:
            self._runner.close()
        self._post_queue.put(None)
        self._threads[1].join(timeout)

    def _feed(self) -> None:
        assert self._runner is not None
        try:
            while not self._stop.is_set():
                try:
                    item = self.source.read(timeout=0.5)
                except EndOfSource:
                    log.info("pipeline %s: source %s finished", self.name, self.source.name)
                    break
                if item is None:
                    stats = self.source.stats
                    self._on_waiting(
                        self.name, "input" if stats.connected else f"source: {stats.last_error or 'connecting'}"
                    )
                    continue
                started = time.perf_counter()
                data = item.image if isinstance(item, Frame) else item.samples
                prepared = self._preprocess(data)
                tensor, transform = prepared if isinstance(prepared, tuple) else (prepared, _IDENTITY)
                now = time.perf_counter()
                self._runner.submit([tensor], _Job(item, transform, now, (now - started) * 1000))
        except Exception:
            log.exception("pipeline %s: feeding the model failed", self.name)
            self.stats.error()
        finally:
            self._runner.wait_all()
            self.finished.set()

    def _on_inferred(self, job: _Job, outputs: Outputs | None, error: BaseException | None) -> None:
        self._post_queue.put((job, outputs, error))

    def _post(self) -> None:
        while (entry := self._post_queue.get()) is not None:
            job, outputs, error = entry
            if error is not None or outputs is None:
                log.warning("pipeline %s: inference failed: %s", self.name, error)
                self.stats.error()
                continue
            try:
                self._publish_result(job, outputs)
            except Exception:
                log.exception("pipeline %s: decoding or publishing a result failed", self.name)
                self.stats.error()
            self._on_progress(self.name)

    def _publish_result(self, job: _Job, outputs: Outputs) -> None:
        inferred = time.perf_counter()
        infer_ms = (inferred - job.submitted) * 1000
        transform = job.transform if isinstance(job.item, Frame) else None
        decoded = self.decoder.decode(outputs, self.model.outputs, transform)
        result = decoded.to_dict()
        publish = self._wanted(decoded)
        post_ms = (time.perf_counter() - inferred) * 1000
        now = time.time()
        latency = StageLatency(job.pre_ms, infer_ms, post_ms, (now - job.item.captured_at) * 1000)
        if publish:
            message = build_result(
                device_id=self.device_id,
                pipeline=self.name,
                source=self.source.name,
                kind="frame" if isinstance(job.item, Frame) else "window",
                index=job.item.index,
                captured_at=job.item.captured_at,
                published_at=now,
                model=self._model_info,
                runtime=self._runtime,
                latency=latency,
                task=self._task,
                result=result,
            )
            self.sink.publish(self._topic, encode(message), self.policy.qos, self.policy.retain)
            self._maybe_snapshot(job.item, decoded)
            if isinstance(decoded, Segmentation) and decoded.mask_png is not None:
                self.sink.publish(self._mask_topic, decoded.mask_png, 0, True)
        self.stats.record(vars(latency), publish)

    def _wanted(self, decoded: Decoded) -> bool:
        score = decoded.top_score
        if self.policy.min_score is not None and score is not None and score < self.policy.min_score:
            return False  # results without a confidence (segmentation, regression) are not thresholded
        if self.policy.only_on_change:
            signature = decoded.signature()
            if signature == self._last_signature:
                return False
            self._last_signature = signature
        return True

    def _maybe_snapshot(self, item: Item, decoded: Decoded) -> None:
        interval = self.policy.snapshot_interval_s
        if interval is None or not isinstance(item, Frame):
            return
        now = time.monotonic()
        if now - self._last_snapshot < interval:
            return
        self._last_snapshot = now
        jpeg = annotate_jpeg(item.image, getattr(decoded, "detections", ()), self.policy.jpeg_quality)
        self.sink.publish(self._snapshot_topic, jpeg, 0, True)


def annotate_jpeg(image: np.ndarray, detections: Any, quality: int) -> bytes:
    """The frame with boxes, labels and keypoints drawn, as JPEG."""
    canvas = image.copy()
    for detection in detections:
        x0, y0, x1, y1 = (round(v) for v in detection.box)
        cv2.rectangle(canvas, (x0, y0), (x1, y1), (0, 200, 0), 2)
        caption = f"{detection.label} {detection.score:.2f}"
        cv2.putText(canvas, caption, (x0, max(12, y0 - 4)), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 200, 0), 1)
        for x, y in getattr(detection, "keypoints", ()):
            cv2.circle(canvas, (int(x), int(y)), 2, (0, 0, 255), -1)
    ok, encoded = cv2.imencode(".jpg", canvas, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return encoded.tobytes()


def _model_info(model: LoadedModel) -> ModelInfo:
    package = model.package
    variant = package.manifest.variants[model.variant_id]
    return ModelInfo(package.name, package.manifest.version, model.variant_id, variant.files[0].sha256)
