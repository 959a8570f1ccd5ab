"""A broker that takes at most QoS 1 is found out at connect, and QoS 2 messages are held, never downgraded.

Mosquitto's `max_qos 1` makes it such a broker for both protocols: it states Maximum QoS 1 in an MQTT 5
CONNACK, and grants QoS 1 to a 3.1.1 client's QoS 2 subscription, as RabbitMQ 3.10 and NATS 2.9 do.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker import Mosquitto
from waiting import wait_for

from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.publisher import Publisher
from edge_runtime.mqtt.settings import MqttSettings, SpoolSettings
from edge_runtime.mqtt.spool import Spool


@pytest.fixture
def qos1_broker(tmp_path: Path) -> Iterator[Mosquitto]:
    with Mosquitto(tmp_path / "broker", listener_options=["max_qos 1"]) as broker:
        yield broker.start()


def _connection(broker: Mosquitto, protocol: str, wanted: bool) -> MqttConnection:
    connection = MqttConnection(MqttSettings(host=broker.host, port=broker.port, protocol=protocol), "box-1")  # type: ignore[arg-type]
    connection.qos.wanted = wanted
    return connection


@pytest.mark.parametrize(
    ("protocol", "source"),
    [("5", "its CONNACK's Maximum QoS"), ("3.1.1", "it granted QoS 1 to a QoS 2 subscription")],
)
def test_the_highest_qos_is_learnt_at_connect(qos1_broker: Mosquitto, protocol: str, source: str) -> None:
    connection = _connection(qos1_broker, protocol, wanted=True)
    connection.start()
    try:
        assert connection.wait_connected(10)
        assert wait_for(lambda: connection.qos.maximum is not None, timeout=5)
        assert (connection.qos.maximum, connection.qos.source) == (1, source)
    finally:
        connection.stop()


def test_qos2_is_never_allowed_while_the_probe_is_answered(qos1_broker: Mosquitto) -> None:
    """The publisher's thread asks `allows(2)` at any moment: also while paho's thread is between reading the
    probe's SUBACK and recording its answer, when a yes would send QoS 2 to a broker that closes the connection
    over it. What `allows(2)` says as the probe's SUBSCRIBE and UNSUBSCRIBE leave is recorded."""
    connection = _connection(qos1_broker, "3.1.1", wanted=True)
    client = connection._client
    seen: list[tuple[str, bool | None]] = []
    subscribe, unsubscribe = client.subscribe, client.unsubscribe

    def recording_subscribe(topic: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(("subscribe", connection.qos.allows(2)))
        return subscribe(topic, *args, **kwargs)

    def recording_unsubscribe(topic: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(("unsubscribe", connection.qos.allows(2)))
        return unsubscribe(topic, *args, **kwargs)

    client.subscribe = recording_subscribe  # type: ignore[method-assign]
    client.unsubscribe = recording_unsubscribe  # type: ignore[method-assign]
    connection.start()
    try:
        assert connection.wait_connected(10)
        assert wait_for(lambda: ("unsubscribe", False) in seen or ("unsubscribe", True) in seen, timeout=5), seen
        assert seen == [("subscribe", None), ("unsubscribe", False)]
    finally:
        connection.stop()


def test_a_full_qos2_broker_is_seen_as_one(mosquitto: Mosquitto) -> None:
    connection = _connection(mosquitto, "3.1.1", wanted=True)
    connection.start()
    try:
        assert connection.wait_connected(10)
        assert wait_for(lambda: connection.qos.maximum == 2, timeout=5)
        assert connection.qos.allows(2) is True
    finally:
        connection.stop()


def test_a_311_box_with_nothing_at_qos2_does_not_ask(qos1_broker: Mosquitto) -> None:
    connection = _connection(qos1_broker, "3.1.1", wanted=False)
    connection.start()
    try:
        assert connection.wait_connected(10)
        assert connection.qos.maximum is None and connection.qos.allows(2) is True
    finally:
        connection.stop()


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
def test_qos2_messages_stay_spooled_while_qos1_ones_flow(
    qos1_broker: Mosquitto, tmp_path: Path, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="edge_runtime.mqtt")
    watcher = qos1_broker.subscribe_collect("edge/box-1/+/result")
    connection = _connection(qos1_broker, protocol, wanted=True)
    spool = Spool(tmp_path / "spool.sqlite")
    publisher = Publisher(connection, spool, SpoolSettings())
    publisher.start()
    connection.start()
    try:
        assert connection.wait_connected(10)
        for index in range(5):
            publisher.publish("edge/box-1/exact/result", f"exact {index}".encode(), qos=2)
            publisher.publish("edge/box-1/plain/result", f"plain {index}".encode(), qos=1)
        assert watcher.wait_count(5, timeout=10)
        assert wait_for(lambda: publisher.stats().held_qos == 5, timeout=5)
        assert sorted(watcher.payloads()) == [f"plain {i}".encode() for i in range(5)]
        # the QoS 2 messages wait for a broker that takes them
        assert wait_for(lambda: publisher.stats().spool_messages == 5, timeout=5), publisher.stats()
        assert connection.connected, "never sent, so the broker had no reason to close the connection"
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1 and f"broker {connection.broker} takes at most QoS 1" in said[0]
    finally:
        publisher.close()
        connection.stop()
        spool.close()
