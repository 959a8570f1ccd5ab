"""One capture of a camera for every pipeline on it: the top-level `sources:` and `source: {type: shared}`.

Two pipelines on one camera that each opened it would open an RTSP stream twice (many cameras refuse the
second connection, and a V4L2 device is exclusive) and decode every frame twice. A named source is opened
once, by a `SharedCapture`, and each pipeline that names it reads through a `SharedSourceConsumer` of its
own. The capture thread hands every frame to each consumer's `FrameOutlet`: a one-frame buffer where a
newer frame replaces an unread one, behind that pipeline's own `max_fps` and motion gate. So a slow
pipeline drops its own frames and never holds up the capture or a faster pipeline, and no queue grows.

A frame is decoded (converted to BGR) only when at least one consumer's rate limit takes it; a consumer
added while the capture runs gets the next frame, and one that leaves takes nothing from the others. The
capture closes when its last consumer leaves, so a reload that restarts one pipeline on a shared camera
leaves the others' frames flowing, while a change to the source itself restarts every pipeline on it.
The same image goes to every consumer, so it is made read-only: no pipeline can draw on another's frame.

A consumer reports the capture's connection (connected, reconnects, outages, the last error) as its own,
so a pipeline and its watchdog see a camera outage as they would on a source of their own; the per-source
figures (`SharedSources.figures`) add what the capture grabbed and decoded for all of them together.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from edge_runtime.errors import ConfigError
from edge_runtime.sources.base import Frame, Source, SourceContext, SourceStats
from edge_runtime.sources.camera import CameraSource
from edge_runtime.sources.configs import Camera, SharedSourceConfig
from edge_runtime.sources.frames import FrameOutlet

log = logging.getLogger(__name__)

__all__ = ["SharedCapture", "SharedSourceConsumer", "SharedSources"]

Rate = Callable[[str, int, float], float]  # a counter's rate per second: key, count, when it was 0 (monotonic)


class SharedCapture(CameraSource):
    """A camera source whose frames go to every attached consumer instead of to one reader."""

    def __init__(self, config: Camera, name: str) -> None:
        super().__init__(config, name)
        self._consumers: tuple[SharedSourceConsumer, ...] = ()
        self._wanting: tuple[SharedSourceConsumer, ...] = ()  # this frame's takers; the capture thread's own
        self._lock = threading.Lock()
        self.ended = False
        self.started = time.monotonic()

    @property
    def consumers(self) -> tuple[SharedSourceConsumer, ...]:
        return self._consumers

    def attach(self, consumer: SharedSourceConsumer) -> None:
        with self._lock:
            self._consumers = (*self._consumers, consumer)
            ended = self.ended
        if ended:  # a file played to its end: the newcomer ends at once, as a source of its own would
            consumer.outlet.finish()

    def detach(self, consumer: SharedSourceConsumer) -> int:
        """Stop handing frames to `consumer`; returns how many consumers are left."""
        with self._lock:
            self._consumers = tuple(c for c in self._consumers if c is not consumer)
            return len(self._consumers)

    def read(self, timeout: float) -> Frame | None:
        raise TypeError("a shared capture is read through its consumers")

    def check_stall(self) -> None:
        """What a reader's `read` does for a source of its own: report a frozen stream from the reading side."""
        self._watch()

    def _admit(self, frame_time: float) -> bool:
        self.frames_captured += 1
        self._wanting = tuple(consumer for consumer in self._consumers if consumer.outlet.admit(frame_time))
        if not self._wanting:
            self._count_unwanted()
        return bool(self._wanting)

    def _offer(self, image: np.ndarray, captured_at: float, frame_time: float) -> None:
        image.flags.writeable = False
        with self.stats.lock:
            self.stats.delivered += 1
        for consumer in self._wanting:
            consumer.outlet.offer(image, captured_at, frame_time)

    def _finish(self) -> None:
        with self._lock:
            self.ended = True
            consumers = self._consumers
        for consumer in consumers:
            consumer.outlet.finish()

    def _count_unwanted(self) -> None:
        with self.stats.lock:
            self.stats.dropped += 1


class SharedSourceConsumer(Source):
    """One pipeline's reader of a shared capture, with its own frame policy, rate limit and motion gate."""

    config: SharedSourceConfig

    def __init__(self, config: SharedSourceConfig, name: str, context: SourceContext | None = None) -> None:
        super().__init__(config, name, context)
        shared = self.context.shared
        if shared is None:
            raise ConfigError(f"source {name}: shared sources need the daemon's `sources:`")
        self._shared = shared
        self.outlet = FrameOutlet(config, name, self.stats)
        self._capture: SharedCapture | None = None

    @property
    def source_name(self) -> str:
        """The name in `sources:` this consumer reads."""
        return self.config.name

    def start(self) -> None:
        if self._capture is None:
            self._capture = self._shared.attach(self.config.name, self)
            self._take_connection()

    def read(self, timeout: float) -> Frame | None:
        capture = self._capture
        if capture is not None:
            capture.check_stall()
        frame = self.outlet.read(timeout)
        self._take_connection()
        return frame

    def close(self) -> None:
        self.outlet.close()
        capture, self._capture = self._capture, None
        if capture is not None:
            self._shared.detach(self.config.name, self)

    def latest_held(self) -> float | None:
        return self.outlet.latest_held

    def outage(self) -> str | None:
        capture = self._capture
        return capture.outage() if capture is not None else None

    def progress(self) -> str | None:
        capture = self._capture
        return capture.progress() if capture is not None else None

    def _take_connection(self) -> None:
        """The capture's connection state as this consumer's, for the pipeline, its watchdog and the stats."""
        capture = self._capture
        if capture is None:
            return
        held = capture.stats
        with held.lock:
            connected, reconnects, outages, last_error = held.connected, held.reconnects, held.outages, held.last_error
        with self.stats.lock:
            self.stats.connected, self.stats.reconnects = connected, reconnects
            self.stats.outages, self.stats.last_error = outages, last_error


class SharedSources:
    """The daemon's named sources: a capture is opened by its first consumer and closed after its last."""

    def __init__(self, configs: Mapping[str, Camera]) -> None:
        self._configs = dict(configs)
        self._captures: dict[str, SharedCapture] = {}
        self._lock = threading.Lock()

    def update(self, configs: Mapping[str, Camera]) -> None:
        """The named sources of a reloaded config. A capture in use keeps running as it is: a reload that
        changes a source restarts every pipeline on it, and the last one leaving closes the old capture."""
        with self._lock:
            self._configs = dict(configs)

    def attach(self, name: str, consumer: SharedSourceConsumer) -> SharedCapture:
        """The running capture of `name` with `consumer` added, opened first if none runs."""
        with self._lock:
            capture = self._captures.get(name)
            if capture is None:
                config = self._configs.get(name)
                if config is None:
                    known = ", ".join(sorted(self._configs)) or "none"
                    raise ConfigError(f"no source named {name!r} in sources: (known: {known})")
                capture = SharedCapture(config, name)
                capture.attach(consumer)
                capture.start()  # a file that is missing raises here, before the capture is kept
                self._captures[name] = capture
                log.info("source %s: opened for %s", capture.target, consumer.name)
                return capture
            capture.attach(consumer)
            return capture

    def detach(self, name: str, consumer: SharedSourceConsumer) -> None:
        with self._lock:
            capture = self._captures.get(name)
            if capture is None or capture.detach(consumer):
                return
            del self._captures[name]
        capture.close()  # outside the lock: joining the capture thread may take a while

    def close(self) -> None:
        with self._lock:
            captures = list(self._captures.values())
            self._captures.clear()
        for capture in captures:
            capture.close()

    def stats_of(self, name: str) -> SourceStats | None:
        capture = self._captures.get(name)
        return capture.stats if capture is not None else None

    def figures(self, readers: Mapping[str, str | None], rate: Rate) -> dict[str, dict[str, Any]]:
        """Per named source in use: its connection, what it grabbed, decoded and left undecoded for all its
        pipelines, and which pipelines read it (`readers`: each pipeline's named source, None for its own)."""
        with self._lock:
            captures = dict(self._captures)
        figures: dict[str, dict[str, Any]] = {}
        for name, capture in captures.items():
            stats = capture.stats
            with stats.lock:
                figures[name] = {
                    "fps_captured": rate(f"sources.{name}.captured", capture.frames_captured, capture.started),
                    "connected": stats.connected,
                    "reconnects": stats.reconnects,
                    "outages": stats.outages,
                    "last_error": stats.last_error,
                    "frames_captured": capture.frames_captured,
                    "decoded": stats.delivered,
                    "undecoded": stats.dropped,
                    "pipelines": sorted(pipeline for pipeline, source in readers.items() if source == name),
                }
        return figures

    def outages(self) -> dict[str, str]:
        """The named sources now unavailable, each with for how long and why."""
        with self._lock:
            captures = dict(self._captures)
        return {name: said for name, capture in captures.items() if (said := capture.outage()) is not None}
