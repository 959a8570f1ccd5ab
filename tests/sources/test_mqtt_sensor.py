"""Sensor readings over MQTT: every payload format, malformed input counted, a real broker end to end."""

from __future__ import annotations

import json
import logging
import struct
import time

import numpy as np
import paho.mqtt.client as mqtt
import pytest
from broker import Mosquitto
from waiting import wait_for

from edge_runtime.errors import ConfigError
from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.settings import MqttSettings
from edge_runtime.sources import make_source
from edge_runtime.sources.base import MessageHandler, SourceContext, Window
from edge_runtime.sources.configs import MqttSourceConfig
from edge_runtime.sources.mqtt_sensor import MalformedPayloadError, MqttSensor, parse_payload


class RecordingContext:
    """Stands in for the daemon's connection: remembers what the source subscribed to."""

    def __init__(self) -> None:
        self.subscriptions: list[tuple[str, int, MessageHandler]] = []

    def subscribe(self, topic: str, qos: int, handler: MessageHandler) -> None:
        self.subscriptions.append((topic, qos, handler))


def sensor(length: int, stride: int, channels: int, **fields: object) -> tuple[MqttSensor, MessageHandler]:
    recorder = RecordingContext()
    config = MqttSourceConfig.model_validate(
        {
            "type": "mqtt",
            "topics": ["plant/+/vibration"],
            "window": {"length": length, "stride": stride, "channels": channels},
            **fields,
        }
    )
    source = make_source(config, "vibration", SourceContext(subscribe=recorder.subscribe))
    assert isinstance(source, MqttSensor)
    source.start()
    [(topic, qos, handler)] = recorder.subscriptions
    assert (topic, qos) == ("plant/+/vibration", 1)
    return source, handler


def windows(source: MqttSensor) -> list[Window]:
    found = []
    while (window := source.read(0.05)) is not None:
        found.append(window)
    return found


@pytest.mark.parametrize(
    ("payload", "channels", "expected"),
    [
        (b"21.5", 1, [[21.5]]),
        (b"[1, 2, 3]", 3, [[1, 2, 3]]),
        (b'{"values": [1, 2.5, -3], "ts": 17}', 3, [[1, 2.5, -3]]),
        (b'{"samples": [[1, 2], [3, 4], [5, 6]]}', 2, [[1, 2], [3, 4], [5, 6]]),
        (b'{"samples": [1, 2, 3]}', 1, [[1], [2], [3]]),
        (struct.pack("<4f", 1.5, -2, 3, 4), 2, [[1.5, -2], [3, 4]]),
    ],
)
def test_json_and_f32_payloads(payload: bytes, channels: int, expected: list[list[float]]) -> None:
    payload_format = "f32le" if payload.startswith(struct.pack("<f", 1.5)) else "json"
    samples = parse_payload(payload, payload_format, channels)
    assert samples.dtype == np.float32
    np.testing.assert_array_equal(samples, np.array(expected, dtype=np.float32))


def test_integer_payloads_are_not_scaled() -> None:
    np.testing.assert_array_equal(parse_payload(struct.pack("<3h", -300, 0, 32767), "i16le", 3), [[-300, 0, 32767]])
    np.testing.assert_array_equal(parse_payload(bytes([0, 7, 255, 1]), "u8", 2), [[0, 7], [255, 1]])


@pytest.mark.parametrize(
    ("payload", "payload_format", "channels", "problem"),
    [
        (b"", "json", 1, "empty"),
        (b"{not json", "json", 1, "not valid JSON"),
        (b"\xff\xfe", "json", 1, "not valid JSON"),
        (b"[1, 2]", "json", 3, "2 values"),
        (b"5", "json", 3, "single number"),
        (b'[1, "2", 3]', "json", 3, "other than numbers"),
        (b"[1, true, 3]", "json", 3, "other than numbers"),
        (b"[1, NaN, 3]", "json", 3, "NaN"),
        (b"[1e39, 0, 0]", "json", 3, "finite"),
        (b"[1e400, 0, 0]", "json", 3, "finite"),
        (b'{"values": [1], "samples": [[1]]}', "json", 1, "exactly one"),
        (b'{"samples": []}', "json", 1, "non-empty"),
        (b'"text"', "json", 1, "got str"),
        (b"null", "json", 1, "got NoneType"),
        (struct.pack("<3f", 1, 2, 3), "f32le", 2, "not whole samples"),
        (struct.pack("<2f", 1, float("nan")), "f32le", 2, "finite"),
        (b"\x01\x02\x03", "i16le", 1, "not whole samples"),
    ],
)
def test_malformed_payloads_say_why(payload: bytes, payload_format: str, channels: int, problem: str) -> None:
    with pytest.raises(MalformedPayloadError, match=problem):
        parse_payload(payload, payload_format, channels)


def test_handler_windows_good_messages_and_counts_bad_ones(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="edge_runtime.sources")
    source, handle = sensor(length=4, stride=2, channels=2, max_payload_bytes=200)
    topic = "plant/pump1/vibration"
    handle(topic, b'{"samples": [[0, 0], [1, 1], [2, 2]]}')
    handle(topic, b"[1, 2, 3]")  # wrong channel count
    handle(topic, b"[3, 3]")
    handle(topic, json.dumps({"samples": [[9, 9]] * 40}).encode())  # over 200 bytes
    handle(topic, b"{broken")
    handle(topic, b'{"values": [4, 4]}')
    handle(topic, b"[5, 5]")
    found = windows(source)
    assert [w.samples[:, 0].tolist() for w in found] == [[0, 1, 2, 3], [2, 3, 4, 5]]
    assert [w.index for w in found] == [0, 1]
    assert all(w.samples.shape == (4, 2) and w.samples.dtype == np.float32 for w in found)
    assert all(w.source == "vibration" and abs(w.captured_at - time.time()) < 60 for w in found)
    assert source.stats.malformed == 3 and source.stats.delivered == 2
    lines = [r.getMessage() for r in caplog.records if "dropped malformed input" in r.getMessage()]
    assert len(lines) == 1, "malformed messages must be logged at a bounded rate"
    assert "topic plant/pump1/vibration: a sample has 3 values, the window expects 2 channels" in lines[0]
    assert "max_payload_bytes (200)" in source.stats.last_error or "JSON" in source.stats.last_error
    source.close()


def test_each_topic_has_its_own_window() -> None:
    source, handle = sensor(length=2, stride=2, channels=1)
    handle("plant/a/vibration", b"1")
    handle("plant/b/vibration", b"100")
    handle("plant/a/vibration", b"2")
    handle("plant/b/vibration", b"200")
    assert [w.samples[:, 0].tolist() for w in windows(source)] == [[1, 2], [100, 200]]


def test_a_slow_model_loses_the_oldest_windows_not_the_mqtt_thread() -> None:
    source, handle = sensor(length=1, stride=1, channels=1)
    for value in range(100):
        handle("plant/a/vibration", str(value).encode())
    found = windows(source)
    assert found[-1].samples[0, 0] == 99
    assert source.stats.dropped == 100 - len(found) > 0


def test_messages_after_close_are_ignored() -> None:
    source, handle = sensor(length=1, stride=1, channels=1)
    source.close()
    handle("plant/a/vibration", b"1")
    handle("plant/a/vibration", b"garbage")
    assert source.stats.malformed == 0 and source.read(0.01) is None


def test_without_a_broker_connection_start_is_a_config_error() -> None:
    config = MqttSourceConfig(type="mqtt", topics=["t"], window={"length": 2, "stride": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="broker connection"):
        make_source(config, "lonely").start()


def test_end_to_end_through_mosquitto(mosquitto: Mosquitto) -> None:
    subscriber = MqttConnection(MqttSettings(host=mosquitto.host, port=mosquitto.port), "sensor-test")
    config = MqttSourceConfig.model_validate(
        {
            "type": "mqtt",
            "topics": ["lab/accel"],
            "payload": "f32le",
            "window": {"length": 8, "stride": 4, "channels": 3},
            "max_payload_bytes": 1024,
        }
    )
    source = make_source(config, "accel", SourceContext(subscribe=subscriber.subscribe))
    source.start()
    subscriber.start()
    assert subscriber.wait_subscribed(10)
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="sources-test-publisher")
    publisher.connect("127.0.0.1", mosquitto.port)
    publisher.loop_start()
    samples = np.arange(48, dtype=np.float32).reshape(16, 3)
    try:
        for begin in range(0, 16, 2):
            publisher.publish("lab/accel", samples[begin : begin + 2].astype("<f4").tobytes(), qos=1).wait_for_publish(
                10
            )
            publisher.publish("lab/accel", b"\x00" * 5, qos=1).wait_for_publish(10)  # not whole samples
        publisher.publish("lab/accel", b"\x00" * 1200, qos=1).wait_for_publish(10)  # oversized
        assert wait_for(lambda: source.stats.malformed == 9), source.stats
        received = [window for window in (source.read(5.0) for _ in range(3)) if window is not None]
    finally:
        publisher.loop_stop()
        publisher.disconnect()
        subscriber.stop()
        source.close()
    assert len(received) == 3
    for number, window in enumerate(received):
        np.testing.assert_array_equal(window.samples, samples[4 * number : 4 * number + 8])
    assert source.stats.delivered == 3 and source.stats.dropped == 0
