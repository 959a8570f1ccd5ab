"""What every input source produces and how the pipeline pulls from it.

A source owns its capture thread (camera sources) or subscription (sensor sources) and hands out
items through `read`. It reconnects by itself after outages and counts what it dropped, so a
pipeline never has to know whether frames come from a USB camera, an RTSP stream or a CSV file.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from edge_runtime.config.base import StrictModel

if TYPE_CHECKING:
    from edge_runtime.sources.shared import SharedSources


class SourceConfig(StrictModel):
    """Base of every source's typed config; each subclass sets `type: Literal["<key>"]`."""

    @property
    def unpaced(self) -> bool:
        """Whether input is ready as fast as the pipeline can take it (a file not played in real time).

        Such a pipeline is judged by how fast it gets through its input, not by how soon each result
        comes out, so its model defaults to the throughput hint instead of the latency hint.
        """
        return False


@dataclass(frozen=True)
class Frame:
    """One camera image as OpenCV decodes it: BGR, uint8, height x width x 3."""

    image: np.ndarray
    index: int  # counts frames the source delivered, from 0, without gaps for dropped ones
    captured_at: float  # wall-clock time (time.time()) when the frame was grabbed
    source: str


@dataclass(frozen=True)
class Window:
    """A window of sensor samples: `length` rows of `channels` float32 values, oldest first."""

    samples: np.ndarray
    index: int
    captured_at: float  # wall-clock time of the newest sample
    source: str


Item = Frame | Window


class EndOfSource(Exception):  # noqa: N818 - not an error: the end of a finite input
    """A finite source (a video file played once, a replayed file) has delivered everything."""


@dataclass
class SourceStats:
    """Counters a source keeps for the stats topic; read without locking (ints are atomic enough)."""

    delivered: int = 0
    dropped: int = 0  # frames replaced by newer ones (policy latest), skipped by max_fps or motion gating
    malformed: int = 0  # sensor messages that could not be parsed, or were too large
    reconnects: int = 0
    outages: int = 0
    connected: bool = False
    last_error: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


MessageHandler = Callable[[str, bytes], None]


@dataclass(frozen=True)
class SourceContext:
    """What the daemon lends its sources: sensor sources on MQTT subscribe through its broker connection, and
    pipelines on a camera named in `sources:` read its one capture."""

    subscribe: Callable[[str, int, MessageHandler], None] | None = None
    shared: SharedSources | None = None


class Source(ABC):
    def __init__(self, config: SourceConfig, name: str, context: SourceContext | None = None) -> None:
        self.config = config
        self.name = name
        self.context = context or SourceContext()
        self.stats = SourceStats()

    @abstractmethod
    def start(self) -> None:
        """Start capturing in the background; returns at once, connection problems are retried."""

    @abstractmethod
    def read(self, timeout: float) -> Item | None:
        """The next item, or None if none arrived within `timeout` seconds; EndOfSource when finished."""

    @abstractmethod
    def close(self) -> None:
        """Stop capturing and release the device or connection."""

    def latest_held(self) -> float | None:
        """The capture time of the newest frame this source read and held back because the scene had not
        changed (the motion gate), or None if it held none. A consumer that follows objects over time
        learns from it that time went by with nothing new to see, while no frame reaches it."""
        return None

    def outage(self) -> str | None:
        """While a live input is unavailable: for how long, why, and when the next try comes; else None."""
        return None

    def progress(self) -> str | None:
        """For an input that ends (a video file played once): how far it is, and about how long is left."""
        return None
