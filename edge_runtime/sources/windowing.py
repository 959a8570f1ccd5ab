"""Sensor samples become model inputs: sliding windows, and what every sensor source shares.

A window is `length` samples of `channels` float32 values, oldest first. The first one is complete
once `length` samples have arrived; after that a new one starts every `stride` samples, so with
stride < length consecutive windows overlap and an event at a window's edge is still seen whole by
the next one. Samples are never reordered or interpolated: a window is exactly what arrived.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edge_runtime.sources.base import EndOfSource, Source, SourceContext, Window
from edge_runtime.sources.configs import SensorSourceConfig, WindowSpec
from edge_runtime.sources.logs import ThrottledLog

log = logging.getLogger(__name__)

WINDOW_QUEUE_LENGTH = 16  # windows waiting for the model; a live sensor drops the oldest beyond this
MALFORMED_LOG_INTERVAL_S = 10.0
_JOIN_TIMEOUT_S = 5.0


class Windower:
    """Cuts a stream of samples into windows of `length` rows, one every `stride` samples."""

    def __init__(self, spec: WindowSpec) -> None:
        self.spec = spec
        self.reset()

    def reset(self) -> None:
        """Forget buffered samples, e.g. where a replayed recording starts over."""
        self._buffer = np.empty((0, self.spec.channels), dtype=np.float32)
        self._next_end = self.spec.length  # buffer row just after the next window's last sample

    def push(self, samples: np.ndarray) -> list[np.ndarray]:
        """Add samples (n x channels) and return the windows they complete, oldest first."""
        rows = np.asarray(samples, dtype=np.float32).reshape(-1, self.spec.channels)
        self._buffer = np.concatenate([self._buffer, rows]) if len(self._buffer) else rows.copy()
        windows = []
        while len(self._buffer) >= self._next_end:
            windows.append(self._buffer[self._next_end - self.spec.length : self._next_end].copy())
            self._next_end += self.spec.stride
        unneeded = self._next_end - self.spec.length
        if unneeded > 0:
            self._buffer = self._buffer[unneeded:]
            self._next_end -= unneeded
        return windows


@dataclass(frozen=True)
class _Ready:
    samples: np.ndarray
    captured_at: float


class SensorSource(Source):
    """Base of sensor sources: a queue of finished windows, and counting of malformed input."""

    config: SensorSourceConfig

    def __init__(self, config: SensorSourceConfig, name: str, context: SourceContext | None = None) -> None:
        super().__init__(config, name, context)
        self._ready: collections.deque[_Ready] = collections.deque()
        self._cond = threading.Condition()
        self._finished = False
        self._closed = False
        self._stop = threading.Event()
        self._next_index = 0
        self._thread: threading.Thread | None = None
        self._malformed_log = ThrottledLog(log, MALFORMED_LOG_INTERVAL_S)

    def read(self, timeout: float) -> Window | None:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._ready) or self._finished or self._closed, timeout)
            if not self._ready:
                if self._finished:
                    raise EndOfSource
                return None
            ready = self._ready.popleft()
            self._cond.notify_all()
            index = self._next_index
            self._next_index += 1
        with self.stats.lock:
            self.stats.delivered += 1
        return Window(ready.samples, index, ready.captured_at, self.name)

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(_JOIN_TIMEOUT_S)
        with self.stats.lock:
            self.stats.connected = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _wait(self, seconds: float) -> bool:
        """Sleep unless closed meanwhile; returns True if the source is closing."""
        return self._stop.wait(max(0.0, seconds))

    def _start_thread(self, target: Callable[[], None]) -> None:
        def run() -> None:
            try:
                target()
            except Exception as error:
                log.exception("source %s: reading failed", self.name)
                with self.stats.lock:
                    self.stats.last_error = f"reading failed: {error}"
            finally:
                self._finish()

        self._thread = threading.Thread(target=run, name=f"source-{self.name}", daemon=True)
        self._thread.start()

    def _emit(self, windower: Windower, samples: np.ndarray, captured_at: float, block: bool) -> None:
        """Window the samples and queue what they complete; a full queue waits (block) or drops the oldest."""
        for window in windower.push(samples):
            self._put(_Ready(window, captured_at), block)

    def _put(self, ready: _Ready, block: bool) -> None:
        with self._cond:
            if block:
                self._cond.wait_for(lambda: len(self._ready) < WINDOW_QUEUE_LENGTH or self._closed)
                if self._closed:
                    return
            elif len(self._ready) >= WINDOW_QUEUE_LENGTH:
                self._ready.popleft()
                with self.stats.lock:
                    self.stats.dropped += 1
            self._ready.append(ready)
            self._cond.notify_all()

    def _finish(self) -> None:
        with self._cond:
            self._finished = True
            self._cond.notify_all()

    def _malformed(self, where: str, reason: str) -> None:
        """Count and drop bad input; the log line is rate-limited so a broken sensor cannot flood it."""
        with self.stats.lock:
            self.stats.malformed += 1
            self.stats.last_error = f"malformed input from {where}: {reason}"
        self._malformed_log.log("source %s: dropped malformed input from %s: %s", self.name, where, reason)
