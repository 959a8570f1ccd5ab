"""Failover across broker nodes (`mqtt.hosts`): which node comes next, and moving on when one is lost.

Three independent Mosquittos stand in for the nodes here: the client's side of failover does not
depend on the nodes sharing anything. What a real cluster keeps across a node's death is tested in
tests/clusters.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker import Mosquitto, free_port
from waiting import wait_for

from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.failover import BrokerRotation, failover_order
from edge_runtime.mqtt.publisher import Publisher
from edge_runtime.mqtt.settings import BrokerAddress, MqttSettings, SpoolSettings
from edge_runtime.mqtt.spool import Spool


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[Mosquitto]]:
    brokers = [Mosquitto(tmp_path / f"node-{i}", persistence=True).start() for i in range(3)]
    yield brokers
    for broker in brokers:
        broker.close()


def _address(broker: Mosquitto) -> str:
    return f"127.0.0.1:{broker.port}"


def _connection(hosts: list[str], device_id: str = "box-1") -> MqttConnection:
    return MqttConnection(MqttSettings(hosts=hosts, client_id=device_id), device_id)


def test_the_first_node_is_preferred_and_the_rest_are_shuffled_once_per_box() -> None:
    brokers = [BrokerAddress(f"node-{i}", 1883) for i in range(5)]
    orders = {tuple(failover_order(brokers, f"box-{n}")) for n in range(40)}
    assert all(order[0] == brokers[0] and sorted(order) == sorted(brokers) for order in orders)
    assert len(orders) > 10, "the boxes of one failed node should spread over the others"
    assert failover_order(brokers, "box-7") == failover_order(brokers, "box-7"), "stable across restarts"


def test_a_move_is_counted_only_when_the_box_connects_to_another_node_than_before() -> None:
    rotation = BrokerRotation([BrokerAddress(f"node-{i}", 1883) for i in range(3)], "box-1")
    first = rotation.first()
    rotation.connected()
    assert rotation.moves == 0
    second = rotation.advance()
    assert second is not None and second != first and rotation.current == second
    third = rotation.advance()  # the second node failed too before any connection
    assert third not in (first, second)
    assert rotation.advance() == first, "the order wraps around"
    rotation.connected()
    assert rotation.moves == 0, "back on the node it used last: not a move"
    rotation.advance()
    rotation.connected()
    assert rotation.moves == 1
    assert rotation.next_attempt(1.5) == f"trying {rotation.current} in 1.5 s"


def test_a_single_node_is_never_left() -> None:
    rotation = BrokerRotation([BrokerAddress("broker.lan", 1883)], "box-1")
    assert rotation.advance() is None and rotation.current == BrokerAddress("broker.lan", 1883)
    assert rotation.next_attempt(2.0) == "reconnecting in 2.0 s"


def test_one_host_keeps_the_host_and_port_fields() -> None:
    assert MqttSettings(host="broker.lan", port=1884).brokers == [BrokerAddress("broker.lan", 1884)]
    assert MqttSettings(hosts=["a", "[fd00::1]:8884", "c:1885"]).brokers == [
        BrokerAddress("a", 1883),
        BrokerAddress("fd00::1", 8884),
        BrokerAddress("c", 1885),
    ]
    assert str(BrokerAddress("fd00::1", 8884)) == "[fd00::1]:8884"


def test_a_dead_first_node_is_passed_over(nodes: list[Mosquitto], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="edge_runtime.mqtt")
    dead = f"127.0.0.1:{free_port()}"
    connection = _connection([dead, *map(_address, nodes)])
    connection.start()
    try:
        assert connection.wait_connected(10), connection.last_error
        assert str(connection.broker) in {_address(n) for n in nodes}
        assert connection.broker_moves == 0, "the first connection is not a move"
        assert any(f"cannot connect to broker {dead}" in r.getMessage() for r in caplog.records)
    finally:
        connection.stop()


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
def test_a_lost_node_moves_the_box_to_the_next_with_its_status_and_subscriptions(
    nodes: list[Mosquitto], protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="edge_runtime.mqtt")
    by_address = {_address(n): n for n in nodes}
    statuses = {address: node.subscribe_collect("edge/box-1/status") for address, node in by_address.items()}
    connection = MqttConnection(
        MqttSettings(hosts=list(by_address), client_id="box-1", protocol=protocol), "box-1", reconnect_min_s=1
    )
    commands: list[bytes] = []
    connection.subscribe("edge/box-1/command", 1, lambda _topic, payload: commands.append(payload))
    connection.start()
    try:
        assert connection.wait_connected(10)
        first = str(connection.broker)
        assert first == _address(nodes[0])
        by_address[first].kill()
        assert wait_for(lambda: connection.connected and str(connection.broker) != first, timeout=15)
        second = str(connection.broker)
        assert connection.broker_moves == 1 and connection.reconnects == 1
        said = re.compile(rf"MQTT: connection to {first} lost: .+; trying {second} in \d\.\d s$")
        assert any(said.match(r.getMessage()) for r in caplog.records), caplog.text
        assert statuses[second].wait_until(lambda m: [x.payload for x in m] == [b"online"], timeout=5)
        assert wait_for(lambda: _delivered(by_address[second], commands), timeout=5), "subscribed again there"
    finally:
        connection.stop()


def _delivered(broker: Mosquitto, inbox: list[bytes]) -> bool:
    broker.publish("edge/box-1/command", b"ping")
    return b"ping" in inbox


def test_results_published_while_nodes_die_all_reach_a_node(nodes: list[Mosquitto], tmp_path: Path) -> None:
    """Every result is acknowledged by some node; what the dead node took before dying was acknowledged
    there, and what it had not acknowledged is sent again to the next one."""
    # persistent watchers on brokers with persistence: what a node acknowledged just before it stopped is
    # still delivered to its watcher once it is back (a stopping Mosquitto need not flush its queues)
    watchers = [node.subscribe_collect("edge/box-1/results", client_id=f"watcher-{i}") for i, node in enumerate(nodes)]
    connection = _connection([_address(n) for n in nodes])
    spool = Spool(tmp_path / "spool.sqlite")
    publisher = Publisher(connection, spool, SpoolSettings(max_in_flight=20))
    connection.start()
    publisher.start()
    try:
        assert connection.wait_connected(10)
        first_node = _address(nodes[0])
        for index in range(300):
            publisher.publish("edge/box-1/results", json.dumps({"index": index}).encode())
            if index == 100:
                nodes[0].stop()
            if index == 200:  # once the box is on another node: the loop takes milliseconds, not seconds
                assert wait_for(lambda: connection.connected and str(connection.broker) != first_node, timeout=15)
                next(n for n in nodes if _address(n) == str(connection.broker)).stop()
        assert wait_for(lambda: publisher.stats().spool_messages == 0, timeout=30), publisher.stats()
        assert connection.broker_moves == 2
        for node in nodes:
            node.start()

        def received() -> set[int]:
            return {json.loads(p)["index"] for w in watchers for p in w.payloads()}

        assert wait_for(lambda: received() == set(range(300)), timeout=15), sorted(set(range(300)) - received())
    finally:
        publisher.close()
        connection.stop()
        spool.close()
