"""Sensor readings sent as text lines over a serial port (USB-serial adapters, microcontrollers).

Each line is one sample: `channels` numbers separated by `separator` (a space means any run of
whitespace), ending in `\\n` (a trailing `\\r` is ignored), e.g. `0.01,-0.98,0.12`. Blank lines are
skipped. A line with the wrong number of values, something that is not a number, a NaN or infinite
value, bytes that are not UTF-8, or more than `max_payload_bytes` bytes is counted as malformed and
dropped, with a warning at most every 10 seconds. The first line after the port opens is usually cut
off mid-way, so if it does not parse it is dropped without being counted.

A port that cannot be opened or that disappears (the adapter was unplugged) is an outage: it is
reopened with backoff, and the outage is counted and logged like a camera's. Needs pyserial
(`pip install pyserial`), imported only when a serial source starts.
"""

from __future__ import annotations

import importlib
import logging
import time
from types import ModuleType
from typing import Any

import numpy as np

from edge_runtime.backoff import Backoff
from edge_runtime.errors import ConfigError
from edge_runtime.sources.configs import SerialSourceConfig
from edge_runtime.sources.reconnect import ConnectionMonitor
from edge_runtime.sources.windowing import SensorSource, Windower

log = logging.getLogger(__name__)

_READ_TIMEOUT_S = 0.25  # how long a read waits for bytes; bounds how long close() takes


class MalformedLineError(ValueError):
    """A line that is not one sample; the text says why."""


def parse_line(line: bytes, separator: str, channels: int) -> np.ndarray | None:
    """One sample (1 x channels, float32) from a line, None for a blank line, or MalformedLineError."""
    try:
        text = line.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise MalformedLineError("the line is not UTF-8 text") from None
    if not text:
        return None
    parts = text.split() if separator.isspace() else [part.strip() for part in text.split(separator)]
    if len(parts) != channels:
        raise MalformedLineError(f"{len(parts)} values in {_shown(text)}, the window expects {channels} channels")
    try:
        sample = np.array([float(part) for part in parts], dtype=np.float64)
    except ValueError:
        raise MalformedLineError(f"not all values are numbers in {_shown(text)}") from None
    if not np.isfinite(sample).all() or np.abs(sample).max() > np.finfo(np.float32).max:
        raise MalformedLineError(f"a value is not a finite float32 number in {_shown(text)}")
    return sample.astype(np.float32).reshape(1, channels)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def import_pyserial() -> ModuleType:
    try:
        return importlib.import_module("serial")
    except ImportError:
        raise ConfigError("serial sources need pyserial: install pyserial (pip install pyserial)") from None


class SerialSensor(SensorSource):
    config: SerialSourceConfig

    def start(self) -> None:
        if self._thread is not None:
            return
        self._serial = import_pyserial()
        self._monitor = ConnectionMonitor(self.stats, self.name, self.config.port)
        self._start_thread(self._run)

    def outage(self) -> str | None:
        monitor: ConnectionMonitor | None = getattr(self, "_monitor", None)
        return None if monitor is None else monitor.outage()

    def _run(self) -> None:
        serial = self._serial
        reconnect = self.config.reconnect
        backoff = Backoff(reconnect.initial_s, reconnect.max_s, reconnect.jitter)
        while not self.closed:
            try:
                port = serial.Serial(self.config.port, self.config.baudrate, timeout=_READ_TIMEOUT_S)
            except (serial.SerialException, OSError) as error:
                delay = backoff.next_delay()
                self._monitor.lost(f"cannot open the port: {error}", delay)
                self._wait(delay)
                continue
            try:
                self._monitor.connected()
                backoff.reset()
                self._read_lines(port)
            except (serial.SerialException, OSError) as error:
                delay = backoff.next_delay()
                self._monitor.lost(f"the port failed: {error}", delay)
                self._wait(delay)
            finally:
                port.close()
        self._monitor.closed()

    def _read_lines(self, port: Any) -> None:
        """Split the byte stream into lines and window their samples, until closed or the port fails."""
        windower = Windower(self.config.window)
        limit = self.config.max_payload_bytes
        pending = bytearray()
        first_line, discarding = True, False
        while not self.closed:
            chunk = port.read(max(1, port.in_waiting))
            if not chunk:
                continue
            pending += chunk
            while (end := pending.find(b"\n")) >= 0:
                line = bytes(pending[:end])
                del pending[: end + 1]
                if discarding:
                    discarding = False
                    continue
                self._take(line, windower, may_be_partial=first_line)
                first_line = False
            if len(pending) > limit:
                if not discarding:
                    self._malformed(self.config.port, f"a line longer than max_payload_bytes ({limit})")
                discarding, first_line = True, False
                pending.clear()

    def _take(self, line: bytes, windower: Windower, may_be_partial: bool) -> None:
        if len(line) > self.config.max_payload_bytes:
            self._malformed(self.config.port, f"a line longer than max_payload_bytes ({self.config.max_payload_bytes})")
            return
        try:
            sample = parse_line(line, self.config.separator, self.config.window.channels)
        except MalformedLineError as problem:
            if may_be_partial:
                log.debug("source %s: dropped the first, possibly cut-off line: %s", self.name, problem)
            else:
                self._malformed(self.config.port, str(problem))
            return
        if sample is not None:
            self._emit(windower, sample, time.time(), block=False)
