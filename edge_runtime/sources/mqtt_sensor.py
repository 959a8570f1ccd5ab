"""Sensor readings that arrive as MQTT messages, on the daemon's own broker connection.

Payload formats (`payload:` in the source config; `channels` comes from `window.channels`):

- `json` (default): UTF-8 JSON, one of
  - a number: one sample; only when `channels` is 1, e.g. `21.5`;
  - an array of exactly `channels` numbers: one sample, e.g. `[0.01, -0.98, 0.12]`;
  - an object with `"values"`: an array of exactly `channels` numbers, one sample,
    e.g. `{"values": [0.01, -0.98, 0.12], "ts": 1718000000.1}`;
  - an object with `"samples"`: a non-empty array of samples, oldest first, each an array of
    exactly `channels` numbers (when `channels` is 1 a sample may also be a bare number),
    e.g. `{"samples": [[0.01, -0.98, 0.12], [0.02, -0.97, 0.11]]}`.

  An object must have exactly one of `"values"` and `"samples"`; other keys are ignored. Numbers
  must be finite: `NaN`, `Infinity`, booleans, strings and `null` make the message malformed.
- `f32le`, `i16le`, `u8`: raw little-endian arrays of 32-bit floats, signed 16-bit integers or
  unsigned bytes, holding one or more whole samples, sample after sample, channel values
  interleaved (`x0 y0 z0 x1 y1 z1 ...`). The byte count must be a non-zero multiple of
  `channels` x the value size (4, 2 or 1 bytes). Integers are converted to float32 as they are,
  without scaling; float NaN or infinity makes the message malformed.

Every message must be at most `max_payload_bytes` long. A message that breaks any of these rules
is counted in the source's `malformed` statistic and dropped whole (none of its samples are used);
a warning naming the topic and the problem is logged at most once every 10 seconds per source,
with the number of messages held back since the previous one.

Each topic (the topic a message arrived on, not the subscription filter) has its own window, so
two sensors matched by one wildcard never mix their samples. When the model falls behind, the
oldest finished windows are dropped (counted in `dropped`) rather than blocking the MQTT client.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import numpy as np

from edge_runtime.errors import ConfigError
from edge_runtime.sources.base import SourceContext
from edge_runtime.sources.configs import MqttSourceConfig
from edge_runtime.sources.windowing import SensorSource, Windower

log = logging.getLogger(__name__)

MAX_TOPICS = 1024  # distinct topics windowed at once; a runaway wildcard cannot exhaust memory
_BINARY_TYPES: dict[str, np.dtype[Any]] = {"f32le": np.dtype("<f4"), "i16le": np.dtype("<i2"), "u8": np.dtype("u1")}


class MalformedPayloadError(ValueError):
    """A message that does not follow the configured payload format; the text says why."""


def parse_payload(payload: bytes, payload_format: str, channels: int) -> np.ndarray:
    """The samples of one message as float32 (n x channels), or MalformedPayloadError saying what is wrong."""
    if not payload:
        raise MalformedPayloadError("the payload is empty")
    if payload_format == "json":
        samples = _parse_json(payload, channels)
    elif payload_format in _BINARY_TYPES:
        samples = _parse_binary(payload, _BINARY_TYPES[payload_format], channels)
    else:
        raise MalformedPayloadError(f"unknown payload format {payload_format!r}")
    if not np.isfinite(samples).all():
        raise MalformedPayloadError("it holds a value that is not a finite number (NaN, infinity, or too large)")
    return samples


def _parse_binary(payload: bytes, dtype: np.dtype[Any], channels: int) -> np.ndarray:
    sample_bytes = dtype.itemsize * channels
    if len(payload) % sample_bytes:
        raise MalformedPayloadError(
            f"{len(payload)} bytes are not whole samples of {channels} x {dtype.itemsize}-byte values"
        )
    return np.frombuffer(payload, dtype=dtype).astype(np.float32).reshape(-1, channels)


def _parse_json(payload: bytes, channels: int) -> np.ndarray:
    try:
        value = json.loads(payload.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as error:
        raise MalformedPayloadError(f"not valid JSON: {error}") from None
    if isinstance(value, dict):
        keys = [key for key in ("values", "samples") if key in value]
        if len(keys) != 1:
            raise MalformedPayloadError('a JSON object needs exactly one of "values" and "samples"')
        if keys[0] == "values":
            rows = [_sample(value["values"], channels)]
        else:
            samples = value["samples"]
            if not isinstance(samples, list) or not samples:
                raise MalformedPayloadError('"samples" must be a non-empty array of samples')
            rows = [_sample(row, channels) for row in samples]
    elif isinstance(value, list):
        rows = [_sample(value, channels)]
    elif _is_number(value):
        if channels != 1:
            raise MalformedPayloadError(f"a single number is one value, but a sample has {channels} channels")
        rows = [[value]]
    else:
        raise MalformedPayloadError(f"expected a number, an array or an object, got {type(value).__name__}")
    try:
        with np.errstate(over="ignore"):
            return np.asarray(rows, dtype=np.float32)
    except (OverflowError, ValueError):
        raise MalformedPayloadError("it holds a number too large for a float32 reading") from None


def _sample(value: object, channels: int) -> list[float]:
    if channels == 1 and _is_number(value):
        return [value]  # type: ignore[list-item]
    if not isinstance(value, list):
        raise MalformedPayloadError(f"a sample must be an array of {channels} numbers, got {type(value).__name__}")
    if len(value) != channels:
        raise MalformedPayloadError(f"a sample has {len(value)} values, the window expects {channels} channels")
    if not all(_is_number(item) for item in value):
        raise MalformedPayloadError("a sample holds something other than numbers")
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a valid reading")


class MqttSensor(SensorSource):
    config: MqttSourceConfig

    def __init__(self, config: MqttSourceConfig, name: str, context: SourceContext | None = None) -> None:
        super().__init__(config, name, context)
        self._windowers: dict[str, Windower] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        subscribe = self.context.subscribe
        if subscribe is None:
            raise ConfigError(
                f"source {self.name}: an MQTT sensor source needs the daemon's broker connection, "
                "and none was given (configure `mqtt:` in the daemon config)"
            )
        for topic in self.config.topics:
            subscribe(topic, self.config.qos, self.handle_message)
        with self.stats.lock:
            self.stats.connected = True

    def handle_message(self, topic: str, payload: bytes) -> None:
        """Called on the MQTT client's thread for each message; never raises."""
        if self.closed:
            return
        try:
            self._accept(topic, payload)
        except MalformedPayloadError as problem:
            self._malformed(f"topic {topic}", str(problem))
        except Exception as error:
            log.debug("source %s: unexpected error on a message from %s", self.name, topic, exc_info=True)
            self._malformed(f"topic {topic}", f"unexpected {type(error).__name__}: {error}")

    def _accept(self, topic: str, payload: bytes) -> None:
        limit = self.config.max_payload_bytes
        if len(payload) > limit:
            raise MalformedPayloadError(f"{len(payload)} bytes, more than max_payload_bytes ({limit})")
        samples = parse_payload(payload, self.config.payload, self.config.window.channels)
        received_at = time.time()
        with self._lock:
            windower = self._windowers.get(topic)
            if windower is None:
                if len(self._windowers) >= MAX_TOPICS:
                    raise MalformedPayloadError(f"more than {MAX_TOPICS} distinct topics; this one is not windowed")
                windower = self._windowers[topic] = Windower(self.config.window)
            self._emit(windower, samples, received_at, block=False)
