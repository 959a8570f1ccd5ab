"""A systemd watchdog that pings only while the work is really getting done.

A ping from a timer thread proves only that the timer thread runs: a pipeline stuck in a driver call or a
wedged MQTT thread would go unnoticed for ever. Here every pipeline gives signs of life, and the pings
stop as soon as one of them has been silent for longer than its stall window; systemd then restarts the
service after WatchdogSec=.

There are two signs of life, so that a handled outage does not look like a hang:
- `beat(name)`: the pipeline made progress (a result went out).
- `waiting(name, reason)`: the pipeline is alive but has nothing to do for a known reason, e.g. its
  camera is in an outage being reconnected or its sensor is silent. It has to be repeated within the
  stall window like a beat (each failed `read(timeout)` is a natural place), unless `up_to` announces a
  longer wait such as a model compile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

log = logging.getLogger(__name__)

DEFAULT_STALL_AFTER_S = 30.0

State = Literal["advancing", "waiting", "stalled"]


class Notifier(Protocol):
    """What the watchdog needs from `SystemdNotifier`."""

    def watchdog(self) -> bool: ...

    def status(self, text: str) -> bool: ...

    def watchdog_interval(self) -> float | None: ...


@dataclass(frozen=True)
class PipelineHealth:
    """One pipeline as the watchdog sees it, e.g. for the stats topic or `systemctl status`."""

    name: str
    state: State
    beats: int  # progress reports since registration
    silent_s: float  # seconds since the last beat or waiting report
    reason: str  # why it waits (state "waiting", or "stalled" after a wait); empty otherwise


@dataclass
class _Pipeline:
    stall_after: float
    last_sign: float
    beats: int = 0
    reason: str = ""
    wait_until: float = 0.0  # a waiting report with `up_to` keeps the pipeline alive until then


class ProgressWatchdog:
    """Sends WATCHDOG=1 every half interval, but only while no registered pipeline has stalled."""

    def __init__(
        self,
        notifier: Notifier,
        interval: float | None = None,
        pipelines: Iterable[str] = (),
        *,
        stall_after: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`interval` is WatchdogSec= in seconds (default: from the notifier's environment; None: no pings).

        `stall_after` is how long a pipeline may stay silent, by default the watchdog interval.
        """
        self._notifier = notifier
        self.interval = notifier.watchdog_interval() if interval is None else interval
        if self.interval is not None and self.interval <= 0:
            raise ValueError(f"watchdog interval must be positive, got {self.interval}")
        self.stall_after = stall_after or self.interval or DEFAULT_STALL_AFTER_S
        self._clock = clock
        self._lock = threading.Lock()
        self._pipelines: dict[str, _Pipeline] = {}
        self._check_lock = threading.Lock()  # check() runs in the ping thread and, in tests, the caller's
        self._stalled: set[str] = set()
        self._last_status = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for name in pipelines:
            self.register(name)

    def register(self, name: str, stall_after: float | None = None) -> None:
        """Start watching a pipeline; registering counts as its first sign of life."""
        window = stall_after or self.stall_after
        if window <= 0:
            raise ValueError(f"stall window of pipeline {name!r} must be positive, got {window}")
        with self._lock:
            self._pipelines[name] = _Pipeline(stall_after=window, last_sign=self._clock())

    def unregister(self, name: str) -> None:
        """Stop watching a pipeline that ended on purpose (finite input played, removed by a reload)."""
        with self._lock:
            self._pipelines.pop(name, None)
            self._stalled.discard(name)

    def beat(self, name: str) -> None:
        """The pipeline made progress. Reports for unregistered names are ignored (shutdown races)."""
        with self._lock:
            pipeline = self._pipelines.get(name)
            if pipeline is not None:
                pipeline.beats += 1
                pipeline.last_sign = self._clock()
                pipeline.reason = ""
                pipeline.wait_until = 0.0

    def waiting(self, name: str, reason: str, up_to: float | None = None) -> None:
        """The pipeline is alive and waiting for a known, handled reason; `up_to` seconds if it may block."""
        with self._lock:
            pipeline = self._pipelines.get(name)
            if pipeline is not None:
                now = self._clock()
                pipeline.last_sign = now
                pipeline.reason = reason
                pipeline.wait_until = now + up_to if up_to else 0.0

    def health(self) -> tuple[PipelineHealth, ...]:
        """Every registered pipeline's state now, in registration order."""
        now = self._clock()
        with self._lock:
            return tuple(self._health_of(name, pipeline, now) for name, pipeline in self._pipelines.items())

    @staticmethod
    def _health_of(name: str, pipeline: _Pipeline, now: float) -> PipelineHealth:
        silent = now - pipeline.last_sign
        state: State
        if silent > pipeline.stall_after and now > pipeline.wait_until:
            state = "stalled"
        else:
            state = "waiting" if pipeline.reason else "advancing"
        return PipelineHealth(name, state, pipeline.beats, silent, pipeline.reason)

    def check(self) -> bool:
        """Ping if every pipeline is advancing or waiting; True when a ping was sent and received."""
        with self._check_lock:
            pipelines = self.health()
            self._log_changes(pipelines)
            self._publish_status(pipelines)
            if any(p.state == "stalled" for p in pipelines):
                return False
            return self._notifier.watchdog()

    def _log_changes(self, pipelines: tuple[PipelineHealth, ...]) -> None:
        stalled = {p.name for p in pipelines if p.state == "stalled"}
        for p in pipelines:
            if p.name in stalled and p.name not in self._stalled:
                last = f"waiting ({p.reason})" if p.reason else f"{p.beats} results"
                log.error(
                    "pipeline %s stalled: no sign of life for %.1f s (last: %s); watchdog pings withheld",
                    p.name,
                    p.silent_s,
                    last,
                )
            elif p.name in self._stalled and p.name not in stalled:
                log.warning("pipeline %s is alive again; watchdog pings resume", p.name)
        self._stalled = stalled

    def _publish_status(self, pipelines: tuple[PipelineHealth, ...]) -> None:
        text = "; ".join(f"{p.name}: {p.state}" + (f" ({p.reason})" if p.reason else "") for p in pipelines)
        if text and text != self._last_status:
            self._last_status = text
            self._notifier.status(text)

    def start(self) -> bool:
        """Ping in a background thread every half interval; False (and no thread) without a watchdog."""
        if self.interval is None or self._thread is not None:
            return False
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="systemd-watchdog", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        assert self.interval is not None
        period = self.interval / 2
        while True:
            try:
                self.check()
            except Exception:  # the ping thread must outlive any bug in logging or status text
                log.exception("watchdog check failed")
            if self._stop.wait(period):
                return

    def stop(self) -> None:
        """Stop pinging (call before shutting the pipelines down, after STOPPING=1)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def __enter__(self) -> ProgressWatchdog:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
