from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from broker import Collector, Mosquitto
from waiting import wait_for

from edge_runtime.errors import ConfigError
from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.publisher import Publisher
from edge_runtime.mqtt.settings import MqttSettings, SpoolSettings
from edge_runtime.mqtt.spool import Spool

TOPIC = "edge/box-1/results"


@dataclass
class Device:
    connection: MqttConnection
    spool: Spool
    publisher: Publisher


@pytest.fixture
def devices(tmp_path: Path) -> Iterator[Callable[..., Device]]:
    """A connection + spool + publisher like the daemon's; closed in the daemon's order after the test."""
    made: list[Device] = []

    def make(broker: Mosquitto, *, connect: bool = True, **spool_settings: Any) -> Device:
        settings = MqttSettings(host="127.0.0.1", port=broker.port, spool=SpoolSettings(**spool_settings))
        connection = MqttConnection(settings, "box-1")
        spool = Spool(tmp_path / "spool.sqlite")
        device = Device(connection, spool, Publisher(connection, spool, settings.spool))
        device.publisher.start()
        if connect:
            connection.start()
            assert connection.wait_connected(5), connection.last_error
        made.append(device)
        return device

    yield make
    for device in made:
        device.publisher.close(timeout=1)
        device.connection.stop()
        device.spool.close()


def numbers(collector: Collector) -> set[int]:
    return {int(p) for p in collector.payloads(TOPIC) if p.isdigit()}


def test_every_result_published_during_a_broker_outage_arrives(
    brokers: Callable[..., Mosquitto], devices: Callable[..., Device]
) -> None:
    broker = brokers(persistence=True)
    # A persistent subscriber: the broker keeps what arrives for it while it reconnects after the restart.
    watcher = broker.subscribe_collect(TOPIC, client_id="watcher")
    device = devices(broker, drain_rate=5000, max_in_flight=50)
    total = 3000
    producer = threading.Thread(target=_produce, args=(device.publisher, total, 2000.0))
    producer.start()
    assert wait_for(lambda: len(numbers(watcher)) > 300)
    broker.stop()
    assert wait_for(lambda: not device.connection.connected, 5)
    handed_to_paho = device.publisher.stats().published
    time.sleep(1.0)  # results keep coming; they must wait in the spool, not in paho's memory
    assert device.publisher.stats().published == handed_to_paho
    assert device.publisher.stats().spool_messages > 500
    broker.start()
    producer.join()
    assert device.publisher.drain(20), device.publisher.stats()
    assert watcher.wait_until(lambda _: numbers(watcher) == set(range(total)), 10), (
        f"missing {sorted(set(range(total)) - numbers(watcher))[:20]}"
    )
    stats = device.publisher.stats()
    assert stats.reconnects == 1
    assert stats.acked >= total and stats.in_flight == 0 and stats.spool_messages == 0
    assert stats.dropped_full == stats.dropped_age == stats.dropped_qos0 == 0


def _produce(publisher: Publisher, total: int, rate: float) -> None:
    start = time.monotonic()
    for i in range(total):
        publisher.publish(TOPIC, b"%d" % i)
        if i % 20 == 0:
            time.sleep(max(0.0, start + i / rate - time.monotonic()))


def test_a_killed_publisher_loses_nothing_it_had_spooled(tmp_path: Path, spawn: Callable[..., Any]) -> None:
    broker = Mosquitto(tmp_path / "broker", persistence=True).start()
    try:
        watcher = broker.subscribe_collect("edge/box-9/results", client_id="watcher")
        spool = str(tmp_path / "spool.sqlite")
        child = spawn("publish", str(broker.port), "box-9", spool)
        child.wait_line(lambda line: line.startswith("durable ") and int(line.split()[1]) >= 500)
        broker.stop()  # the rest piles up in the spool...
        child.wait_line(lambda line: line.startswith("durable ") and int(line.split()[1]) >= 1500)
        child.kill()  # ...and the process dies with it unsent
        durable = child.read_durable()
        broker.start()
        resumed = spawn("resume", str(broker.port), "box-9", spool)
        backlog = int(resumed.wait_line(lambda line: line.startswith("backlog ")).split()[1])
        assert backlog > 0
        assert resumed.wait_line(lambda line: line.startswith("drained ")) == "drained True"
        expected = set(range(durable + 1))
        arrived = lambda: {int(p) for p in watcher.payloads()}  # noqa: E731
        assert watcher.wait_until(lambda _: expected <= arrived(), 10), f"missing {sorted(expected - arrived())[:20]}"
    finally:
        broker.close()


def test_backlog_drains_at_its_rate_while_live_results_go_first(
    mosquitto: Mosquitto, devices: Callable[..., Device]
) -> None:
    watcher = mosquitto.subscribe_collect(TOPIC)
    device = devices(mosquitto, connect=False, drain_rate=200, max_in_flight=100)
    for i in range(300):
        device.publisher.publish(TOPIC, b"backlog %d" % i)
    assert device.publisher.stats().published == 0
    started = time.monotonic()
    device.connection.start()
    assert wait_for(lambda: device.publisher.stats().published > 0, 5)
    for i in range(20):
        device.publisher.publish(TOPIC, b"live %d" % i)
    assert device.publisher.drain(10)
    elapsed = time.monotonic() - started
    assert watcher.wait_count(320)
    payloads = watcher.payloads(TOPIC)
    backlog = [p for p in payloads if p.startswith(b"backlog")]
    assert backlog == [b"backlog %d" % i for i in range(300)]  # oldest first
    last_live = max(payloads.index(b"live %d" % i) for i in range(20))
    assert last_live < payloads.index(b"backlog 150")  # live results did not wait for the backlog
    assert 300 / 200 - 0.3 < elapsed < 5  # 200/s, apart from a 0.1 s burst


def test_in_flight_stays_within_the_window_and_the_brokers_receive_maximum(
    brokers: Callable[..., Mosquitto], devices: Callable[..., Device]
) -> None:
    broker = brokers(listener_options=["max_inflight_messages 7"])
    device = devices(broker, max_in_flight=100)
    assert device.connection.receive_maximum == 7
    seen: list[int] = []
    for i in range(3000):
        device.publisher.publish(TOPIC, b"%d" % i)
        if i % 10 == 0:
            seen.append(device.publisher.stats().in_flight)
    assert device.publisher.drain(20)
    assert max(seen) <= 7
    assert device.publisher.stats().acked == 3000


def test_acks_reopen_a_full_window_without_waiting_for_more_results(
    brokers: Callable[..., Mosquitto], devices: Callable[..., Device]
) -> None:
    # Acks wake the thread only when the window is full. A burst of 700 through a window of 7 is then
    # 100 windows, each reopened by its acks; had they waited for the idle timeout it would take 10 s.
    broker = brokers(listener_options=["max_inflight_messages 7"])
    watcher = broker.subscribe_collect(TOPIC)
    device = devices(broker, max_in_flight=100)
    started = time.monotonic()
    for i in range(700):
        device.publisher.publish(TOPIC, b"%d" % i)
    assert watcher.wait_until(lambda _: len(numbers(watcher)) == 700, 10)
    assert time.monotonic() - started < 4.0
    assert wait_for(lambda: device.publisher.stats().acked == 700, 2)  # settled at a turn, without drain()


def test_qos0_bypasses_the_spool_and_is_dropped_while_disconnected(
    mosquitto: Mosquitto, devices: Callable[..., Device]
) -> None:
    watcher = mosquitto.subscribe_collect("edge/box-1/stats", qos=0)
    device = devices(mosquitto, connect=False)
    device.publisher.publish("edge/box-1/stats", b"lost", qos=0)
    device.connection.start()
    assert device.connection.wait_connected(5)
    device.publisher.publish("edge/box-1/stats", b"sent", qos=0)
    assert watcher.wait_count(1)
    stats = device.publisher.stats()
    assert (stats.dropped_qos0, stats.spooled, stats.spool_messages) == (1, 0, 0)
    assert watcher.payloads() == [b"sent"]


def test_refused_messages_are_counted_not_retried_forever(
    tmp_path: Path, brokers: Callable[..., Mosquitto], devices: Callable[..., Device]
) -> None:
    acl = tmp_path / "acl"
    acl.write_text(f"topic write {TOPIC}\n")
    broker = brokers(listener_options=[f"acl_file {acl}"])
    watcher = broker.subscribe_collect("edge/#")
    device = devices(broker)
    device.publisher.publish("edge/box-1/forbidden", b"no")
    device.publisher.publish(TOPIC, b"yes")
    assert device.publisher.drain(5)
    stats = device.publisher.stats()
    assert (stats.acked, stats.rejected, stats.spool_messages) == (1, 1, 0)
    assert watcher.wait_until(lambda ms: b"yes" in [m.payload for m in ms])
    assert b"no" not in watcher.payloads()


def test_close_keeps_what_was_not_sent_for_the_next_start(
    tmp_path: Path, brokers: Callable[..., Mosquitto], devices: Callable[..., Device]
) -> None:
    broker = brokers()
    device = devices(broker)
    broker.stop()
    assert wait_for(lambda: not device.connection.connected, 5)
    for i in range(100):
        device.publisher.publish(TOPIC, b"%d" % i)
    started = time.monotonic()
    device.publisher.close(timeout=3)
    assert time.monotonic() - started < 1.5  # nothing in flight to wait for
    device.connection.stop()
    device.spool.close()
    with Spool(tmp_path / "spool.sqlite") as reopened:
        assert [r.payload for r in reopened.take(1000)] == [b"%d" % i for i in range(100)]


def test_a_topic_paho_would_refuse_is_refused_before_it_reaches_the_spool(
    mosquitto: Mosquitto, devices: Callable[..., Device]
) -> None:
    device = devices(mosquitto, connect=False)
    for topic in ("edge/+/results", "edge/#", ""):
        with pytest.raises(ConfigError, match="cannot publish to MQTT topic"):
            device.publisher.publish(topic, b"x")
    assert device.spool.depth.count == 0
