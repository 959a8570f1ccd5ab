"""Recorded sensor data played back as if it arrived live: for testing a model on a box, or demos.

Files:
- CSV: one sample per row, `channels` numeric columns separated by commas. A first row that is not
  all numbers is a header and skipped. A later row with the wrong number of columns or a value that
  is not a finite number is counted as malformed and skipped (logged at most every 10 seconds).
- .npy: a 2-D array of samples x channels (a 1-D array when `channels` is 1), any numeric dtype,
  loaded without pickles. Rows with NaN or infinite values are counted as malformed and skipped.

With `rate_hz` the samples are paced at that rate, like a live sensor; without it they are replayed
as fast as the model takes the windows (the replay waits while the window queue is full, so none are
lost). A looping replay starts a fresh window at each pass, so no window mixes the end of the
recording with its beginning. A replay played once ends with EndOfSource after its last window.
"""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path

import numpy as np

from edge_runtime.errors import ConfigError
from edge_runtime.sources.configs import ReplaySourceConfig
from edge_runtime.sources.windowing import SensorSource, Windower

log = logging.getLogger(__name__)

_TICK_S = 0.02  # paced replay hands over the samples due in each tick of this length


class ReplaySensor(SensorSource):
    config: ReplaySourceConfig

    def start(self) -> None:
        if self._thread is not None:
            return
        self.samples = self._load()
        with self.stats.lock:
            self.stats.connected = True
        self._start_thread(self._play)

    def _load(self) -> np.ndarray:
        path, channels = self.config.path, self.config.window.channels
        if not path.is_file():
            raise ConfigError(f"source {self.name}: replay file {path} does not exist")
        samples = self._load_npy(path, channels) if path.suffix.lower() == ".npy" else self._load_csv(path, channels)
        if len(samples) == 0:
            raise ConfigError(f"source {self.name}: replay file {path} holds no valid samples")
        return samples

    def _load_npy(self, path: Path, channels: int) -> np.ndarray:
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise ConfigError(f"source {self.name}: cannot read {path} as a .npy array: {error}") from None
        if array.ndim == 1 and channels == 1:
            array = array.reshape(-1, 1)
        if array.ndim != 2 or array.shape[1] != channels or not np.issubdtype(array.dtype, np.number):
            raise ConfigError(
                f"source {self.name}: {path} holds a {array.dtype} array of shape {array.shape}; "
                f"expected numbers, samples x {channels} channels"
            )
        with np.errstate(over="ignore", invalid="ignore"):
            samples = array.astype(np.float32)
        finite = np.isfinite(samples).all(axis=1)
        for row in np.flatnonzero(~finite):
            self._malformed(f"{path} row {row}", "a value is not a finite float32 number")
        kept: np.ndarray = samples[finite]
        return kept

    def _load_csv(self, path: Path, channels: int) -> np.ndarray:
        rows: list[list[float]] = []
        try:
            with path.open(newline="", encoding="utf-8") as file:
                for number, row in enumerate(csv.reader(file), start=1):
                    if not row or all(not cell.strip() for cell in row):
                        continue
                    values = _numbers(row)
                    if values is None and number == 1:
                        continue  # a header
                    problem = _row_problem(values, channels)
                    if values is None or problem:
                        self._malformed(f"{path} line {number}", problem)
                        continue
                    rows.append(values)
        except (OSError, UnicodeDecodeError, csv.Error) as error:
            raise ConfigError(f"source {self.name}: cannot read {path} as CSV: {error}") from None
        return np.asarray(rows, dtype=np.float32).reshape(-1, channels)

    def _play(self) -> None:
        windower = Windower(self.config.window)
        rate = self.config.rate_hz
        chunk = max(1, round(rate * _TICK_S)) if rate else self.config.window.stride
        started, played = time.monotonic(), 0
        while not self.closed:
            windower.reset()
            for begin in range(0, len(self.samples), chunk):
                if rate is not None and self._wait(started + played / rate - time.monotonic()):
                    return
                if self._stop.is_set():
                    return
                part = self.samples[begin : begin + chunk]
                played += len(part)
                self._emit(windower, part, time.time(), block=True)
            if not self.config.loop:
                return


def _numbers(row: list[str]) -> list[float] | None:
    try:
        return [float(cell) for cell in row]
    except ValueError:
        return None


def _row_problem(values: list[float] | None, channels: int) -> str:
    if values is None:
        return f"not all values are numbers; expected {channels} numbers"
    if len(values) != channels:
        return f"{len(values)} columns; expected {channels} numbers"
    if not all(np.isfinite(values)) or any(abs(value) > np.finfo(np.float32).max for value in values):
        return "a value is not a finite float32 number"
    return ""
