"""What a pipeline does with each result it keeps: plain callables, each isolated from the others.

The post stage decodes the model's outputs and describes the result once (`Described`: the item, its
decoded form and the result message). Each output then takes what it needs: the message to the result
topic, an annotated snapshot, a segmentation mask. A new kind of output (a file, a webhook) is one more
callable in the list; one that fails is logged and counted by the pipeline, and the others still run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import cv2
import numpy as np

from edge_runtime.decoders.decoded import Decoded, Segmentation
from edge_runtime.mqtt.topics import Topics
from edge_runtime.pipeline.results import encode
from edge_runtime.sources.base import Frame, Item

__all__ = [
    "Described",
    "MessageSink",
    "Output",
    "PublishPolicy",
    "SnapshotPublisher",
    "annotate_jpeg",
    "publish_outputs",
]


class MessageSink(Protocol):
    """Where outputs hand their messages: the spooling MQTT publisher in the daemon."""

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> None: ...


@dataclass(frozen=True)
class Described:
    item: Item
    decoded: Decoded
    message: dict[str, Any]  # the result message, as result.schema.json describes it


Output = Callable[[Described], None]


@dataclass(frozen=True)
class PublishPolicy:
    """Which results a pipeline keeps (score threshold, only on change) and how its outputs publish them."""

    qos: int = 1
    retain: bool = False
    only_on_change: bool = False
    min_score: float | None = None
    snapshot_interval_s: float | None = None  # None: no snapshots
    jpeg_quality: int = 80


def publish_outputs(policy: PublishPolicy, topics: Topics, pipeline: str, sink: MessageSink) -> list[Output]:
    """The outputs a pipeline publishes over MQTT: its results, snapshots where asked, and segmentation masks."""
    outputs: list[Output] = [_ResultPublisher(sink, topics.result(pipeline), policy.qos, policy.retain)]
    if policy.snapshot_interval_s is not None:
        outputs.append(
            SnapshotPublisher(sink, topics.snapshot(pipeline), policy.snapshot_interval_s, policy.jpeg_quality)
        )
    outputs.append(_MaskPublisher(sink, topics.mask(pipeline)))
    return outputs


@dataclass(frozen=True)
class _ResultPublisher:
    sink: MessageSink
    topic: str
    qos: int
    retain: bool

    def __call__(self, described: Described) -> None:
        self.sink.publish(self.topic, encode(described.message), self.qos, self.retain)


@dataclass(frozen=True)
class _MaskPublisher:
    """A segmentation result's mask as PNG, retained, so a dashboard shows the latest one."""

    sink: MessageSink
    topic: str

    def __call__(self, described: Described) -> None:
        decoded = described.decoded
        if isinstance(decoded, Segmentation) and decoded.mask_png is not None:
            self.sink.publish(self.topic, decoded.mask_png, 0, True)


class SnapshotPublisher:
    """The frame with its detections drawn, as JPEG, at most once per interval, retained."""

    def __init__(self, sink: MessageSink, topic: str, interval_s: float, quality: int) -> None:
        self.sink = sink
        self.topic = topic
        self.interval_s = interval_s
        self.quality = quality
        self._last = 0.0

    def __call__(self, described: Described) -> None:
        if not isinstance(described.item, Frame):
            return
        now = time.monotonic()
        if now - self._last < self.interval_s:
            return
        self._last = now
        detections = getattr(described.decoded, "detections", ())
        self.sink.publish(self.topic, annotate_jpeg(described.item.image, detections, self.quality), 0, True)


def annotate_jpeg(image: np.ndarray, detections: Sequence[Any], quality: int) -> bytes:
    """The frame with boxes, labels and the keypoints on the frame drawn, as JPEG."""
    canvas = image.copy()
    for detection in detections:
        x0, y0, x1, y1 = (round(v) for v in detection.box)
        cv2.rectangle(canvas, (x0, y0), (x1, y1), (0, 200, 0), 2)
        caption = f"{detection.label} {detection.score:.2f}"
        cv2.putText(canvas, caption, (x0, max(12, y0 - 4)), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 200, 0), 1)
        for point in getattr(detection, "keypoints", ()):
            if point.in_frame:
                cv2.circle(canvas, (int(point.x), int(point.y)), 2, (0, 0, 255), -1)
    ok, encoded = cv2.imencode(".jpg", canvas, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return encoded.tobytes()
