"""What every image source shares: the capture thread, frame policies, rate limit and motion gate.

The capture thread and the pipeline meet in a small buffer. With policy `latest` it holds one frame
and a newer frame replaces an unread one, so a slow model always works on the present instead of
on a queue of stale frames. With policy `every` it is a short queue whose producer waits when it is
full: a video file is decoded exactly as fast as the model consumes it and nothing is lost.
"""

from __future__ import annotations

import collections
import logging
import threading
from abc import abstractmethod
from dataclasses import dataclass

import numpy as np

from edge_runtime.sources.base import EndOfSource, Frame, Source, SourceContext, SourceStats
from edge_runtime.sources.configs import CaptureSettings, ImageSourceConfig
from edge_runtime.sources.motion import MotionDetector

log = logging.getLogger(__name__)

EVERY_QUEUE_LENGTH = 4  # enough to hide decode jitter, small enough not to hold much memory
_JOIN_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Captured:
    image: np.ndarray
    captured_at: float


class FrameBuffer:
    """A bounded FIFO between the capture thread and `read`; full means replace or wait."""

    def __init__(self, capacity: int, replace_oldest: bool) -> None:
        self.capacity = capacity
        self.replace_oldest = replace_oldest
        self._items: collections.deque[Captured] = collections.deque()
        self._cond = threading.Condition()
        self._finished = False
        self._closed = False

    def put(self, item: Captured) -> int:
        """Add a frame; returns how many unread frames it replaced (0 or 1)."""
        with self._cond:
            replaced = 0
            if self.replace_oldest:
                if len(self._items) >= self.capacity:
                    self._items.popleft()
                    replaced = 1
            else:
                self._cond.wait_for(lambda: len(self._items) < self.capacity or self._closed)
                if self._closed:
                    return 0
            self._items.append(item)
            self._cond.notify_all()
            return replaced

    def get(self, timeout: float) -> Captured | None:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._items) or self._finished or self._closed, timeout)
            if self._items:
                item = self._items.popleft()
                self._cond.notify_all()
                return item
            if self._finished:
                raise EndOfSource
            return None

    def finish(self) -> None:
        """No more frames will come: `get` raises EndOfSource once the buffer is empty."""
        with self._cond:
            self._finished = True
            self._cond.notify_all()

    def close(self) -> None:
        """Release a producer waiting for room; frames put afterwards are discarded."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class RateLimiter:
    """Lets frames through at most `max_fps` per second of the frames' own clock, on average."""

    def __init__(self, max_fps: float) -> None:
        self.interval = 1.0 / max_fps
        self._due: float | None = None

    def admit(self, now: float) -> bool:
        if self._due is not None and now < self._due - 0.01 * self.interval:
            return False
        if self._due is None or now > self._due + self.interval:
            self._due = now + self.interval  # after a gap, restart the schedule instead of bursting
        else:
            self._due += self.interval
        return True


class FrameOutlet:
    """Where one reader takes frames: its buffer, frame policy, rate limit and motion gate, and its counters.

    A source read by one pipeline has one; a capture shared by several pipelines (`shared`) has one per
    pipeline, so each keeps its own `max_fps`, policy and motion gate, and a slow one only drops its own frames.
    """

    def __init__(self, selection: ImageSourceConfig, name: str, stats: SourceStats) -> None:
        self.name = name
        self.stats = stats
        latest = selection.policy == "latest"
        self._buffer = FrameBuffer(1 if latest else EVERY_QUEUE_LENGTH, replace_oldest=latest)
        self._rate = RateLimiter(selection.max_fps) if selection.max_fps else None
        motion = selection.motion
        self._motion = MotionDetector(motion) if motion is not None and motion.enabled else None
        self.latest_held: float | None = None  # capture time; one reference, written by the capture thread
        self._next_index = 0

    def admit(self, frame_time: float) -> bool:
        """Apply `max_fps` to a grabbed frame, before it is decoded; `frame_time` in s."""
        if self._rate is None or self._rate.admit(frame_time):
            return True
        self.count_dropped()
        return False

    def offer(self, image: np.ndarray, captured_at: float, frame_time: float) -> None:
        """Hand an admitted frame to the reader, unless the motion gate holds it back."""
        if self._motion is not None and not self._motion.passes(image, frame_time):
            self.latest_held = captured_at
            self.count_dropped()
            return
        if self._buffer.put(Captured(image, captured_at)):
            self.count_dropped()

    def read(self, timeout: float) -> Frame | None:
        captured = self._buffer.get(timeout)
        if captured is None:
            return None
        frame = Frame(captured.image, self._next_index, captured.captured_at, self.name)
        self._next_index += 1
        with self.stats.lock:
            self.stats.delivered += 1
        return frame

    def finish(self) -> None:
        self._buffer.finish()

    def close(self) -> None:
        self._buffer.close()

    def count_dropped(self) -> None:
        with self.stats.lock:
            self.stats.dropped += 1


class FrameSource(Source):
    """Base of image sources: subclasses implement `_capture`, which calls `_admit` and `_offer`."""

    config: CaptureSettings

    def __init__(
        self, config: CaptureSettings, name: str, context: SourceContext | None, selection: ImageSourceConfig
    ) -> None:
        """`selection`: which frames the reader takes (policy, max_fps, motion), usually `config` itself."""
        super().__init__(config, name, context)
        self._outlet = FrameOutlet(selection, name, self.stats)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.frames_captured = 0  # frames grabbed from the input, delivered or not
        self._join_timeout_s = _JOIN_TIMEOUT_S

    def start(self) -> None:
        if self._thread is not None:
            return
        self._prepare()
        self._thread = threading.Thread(target=self._run, name=f"source-{self.name}", daemon=True)
        self._thread.start()

    def read(self, timeout: float) -> Frame | None:
        self._watch()
        return self._outlet.read(timeout)

    def close(self) -> None:
        self._stop.set()
        self._outlet.close()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._join_timeout_s)
            if thread.is_alive():
                log.warning("source %s: the capture thread did not stop within %.0f s", self.name, self._join_timeout_s)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _prepare(self) -> None:
        """Check what can be checked before the thread starts; raise ConfigError for what is wrong."""

    def _watch(self) -> None:
        """Called on every `read`: a place for checks that must not wait for the capture thread."""

    @abstractmethod
    def _capture(self) -> None:
        """Produce frames until the input ends or `stopping`; runs on the capture thread."""

    def _run(self) -> None:
        try:
            self._capture()
        except Exception as error:
            log.exception("source %s: capture failed", self.name)
            with self.stats.lock:
                self.stats.last_error = f"capture failed: {error}"
                self.stats.connected = False
        finally:
            self._finish()

    def _finish(self) -> None:
        """The input has ended or failed for good: readers get EndOfSource once they have what was captured."""
        self._outlet.finish()

    def _admit(self, frame_time: float) -> bool:
        """Count a grabbed frame and apply `max_fps`, before the frame is decoded; `frame_time` in s."""
        self.frames_captured += 1
        return self._outlet.admit(frame_time)

    def latest_held(self) -> float | None:
        return self._outlet.latest_held

    def _offer(self, image: np.ndarray, captured_at: float, frame_time: float) -> None:
        """Hand an admitted frame to the reader, unless the motion gate holds it back."""
        self._outlet.offer(image, captured_at, frame_time)

    def _wait(self, seconds: float) -> bool:
        """Sleep unless closed meanwhile; returns True if the source is stopping."""
        return self._stop.wait(seconds) if seconds > 0 else self._stop.is_set()
