"""What the pipeline tests run a pipeline between: frames from memory, and a sink that records what it is handed."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.base import Decoder
from edge_runtime.placement.model import LoadedModel
from edge_runtime.sources.base import EndOfSource, Frame, Source, SourceConfig

RESULT_TOPIC = "edge/box/faces/result"
SNAPSHOT_TOPIC = "edge/box/faces/snapshot"


class FramesOnce(Source):
    """The given frames, one per read, then the end: a file played once, from memory.

    Frames are stamped with the time they are read, or, with `interval_s`, as a camera filming at that interval
    would have captured them, however fast they are read.
    """

    def __init__(self, frames: Sequence[np.ndarray], interval_s: float | None = None) -> None:
        super().__init__(SourceConfig(), "frames")
        self._frames = list(frames)
        self._interval_s = interval_s
        self._started = time.time() - len(frames) * (interval_s or 0.0)  # the last capture not in the future

    def start(self) -> None:
        self.stats.connected = True

    def read(self, timeout: float) -> Frame | None:
        index = self.stats.delivered
        if index >= len(self._frames):
            raise EndOfSource
        self.stats.delivered += 1
        captured_at = time.time() if self._interval_s is None else self._started + index * self._interval_s
        return Frame(self._frames[index], index, captured_at, self.name)

    def close(self) -> None:
        self._frames = self._frames[: self.stats.delivered]


class RecordingSink:
    """Keeps every (topic, payload, qos, retain) handed to it, in order."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes, int, bool]] = []
        self._lock = threading.Lock()

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        with self._lock:
            self.messages.append((topic, payload, qos, retain))

    def results(self) -> list[dict[str, Any]]:
        return [json.loads(payload) for topic, payload, _, _ in self.messages if topic == RESULT_TOPIC]

    def on(self, topic: str) -> list[tuple[str, bytes, int, bool]]:
        return [message for message in self.messages if message[0] == topic]


def face_decoder(model: LoadedModel) -> Decoder:
    spec = model.package.manifest.decoder
    assert spec is not None
    return make_decoder(spec.name, spec.params, model.package.manifest.labels)
