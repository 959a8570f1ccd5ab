"""A thousand boxes on one Mosquitto and on a three-node RabbitMQ cluster: a broker goes down mid-run, nothing is lost.

Each box is the daemon's own connection, spool and publisher (`tests/simulated_boxes.py`), 250 of them per
child process (`fleet_boxes.py`), publishing schema-valid results at QoS 1 with a retained status and a
Last Will; two real daemons play a clip among them. A consumer with a durable subscription counts every
(device, frame index) it receives. Mid-run the broker is taken down and brought back; at the end every
result each box reports having produced must have arrived (duplicates are allowed and counted: delivery
is at-least-once). It is a test of correctness at scale, not a benchmark: rates are kept low enough for
two cores shared with the brokers, and the figures it prints are what docs/performance.md records.

With EDGE_FLEET_REPORT=DIR the figures are also written to DIR/fleet-mosquitto.json and
DIR/fleet-rabbitmq-cluster.json.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as paho
import pika  # type: ignore[import-untyped]
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

sys.path.insert(0, str(Path(__file__).parent))

from broker import Mosquitto
from daemon_process import DaemonProcess, write_clip
from fleet_harness import (
    Fleet,
    Sampler,
    Tally,
    check,
    connections_per_port,
    expected_results,
    explain_losses,
    summarize,
    write_daemon_config,
)
from rabbitmq_cluster import RabbitMqCluster

PROCESSES, BOXES_PER_PROCESS, RATE = 4, 250, 0.5  # 1,000 boxes, 500 results/s in all
DAEMONS = 2
DAEMON_FPS, DAEMON_FRAMES = 5, 200  # a 40 s clip, played in real time: it spans the outage
OUTAGE_AT_S = 15  # after every box is connected
RUN_S = 45  # how long the boxes publish, at least; the RabbitMQ run goes on until its node is back


def test_a_thousand_boxes_on_one_mosquitto_lose_nothing_across_its_restart(
    tmp_path: Path, astronaut_bgr: np.ndarray
) -> None:
    """The broker is stopped with SIGTERM, so Mosquitto writes its persistence file (the consumer's session and
    queue, every message it acknowledged) before it exits, and is started again 3 s later. A SIGKILLed
    Mosquitto would lose whatever it acknowledged after its last autosave: that is the broker's property
    (one node, saving every `autosave_interval`), not the boxes'; the cluster test below kills a node."""
    broker = Mosquitto(tmp_path / "broker", persistence=True).start()
    sampler = Sampler()
    sampler.watch("mosquitto", _mosquitto_pid(broker))
    tally = Tally()
    consumer = MqttConsumer(broker.host, broker.control_port, tally)

    def outage() -> dict[str, Any]:
        before = connections_per_port([broker.port])[broker.port]
        stopped = time.monotonic()
        broker.stop()
        time.sleep(max(0.0, stopped + 3 - time.monotonic()))
        started = time.monotonic()
        broker.start()
        sampler.watch("mosquitto-restarted", _mosquitto_pid(broker))
        back = _wait(lambda: connections_per_port([broker.port])[broker.port] >= before, timeout=60)
        return {
            "outage": "SIGTERM, restart 3 s later",
            "connections_before": before,
            "down_s": round(started - stopped, 1),
            "all_reconnected_after_start_s": round(time.monotonic() - started, 1) if back else None,
        }

    try:
        run_fleet(
            tmp_path,
            astronaut_bgr,
            "mosquitto",
            tally,
            sampler,
            outage,
            hosts=[f"{broker.host}:{broker.port}"],
            protocol="5",
            rotate=False,
        )
    finally:
        consumer.close()
        sampler.close()
        broker.close()


@pytest.mark.timeout(900)  # the session's cluster may boot inside this test's time
def test_a_thousand_boxes_on_a_rabbitmq_cluster_lose_nothing_when_a_node_is_killed(
    tmp_path: Path, astronaut_bgr: np.ndarray, rabbitmq_cluster: RabbitMqCluster
) -> None:
    """The node holding the most MQTT connections is SIGKILLed: its boxes fail over to the other two within
    their reconnect backoff, re-sending what it had not acknowledged. What it had acknowledged is safe: the
    MQTT plugin answers PUBACK only once the quorum queue (replicated on all three nodes) has the message.
    The node is then started with its data and rejoins."""
    cluster = rabbitmq_cluster
    cluster.heal()
    results = cluster.declare_queue("fleet-results", "edge/+/+/result")
    statuses = cluster.declare_queue("fleet-status", "edge/+/status")
    cluster.purge(results)
    cluster.purge(statuses)
    sampler = Sampler()
    for node in cluster.nodes:
        sampler.watch(f"rabbitmq-node{node.index + 1}", node.beam_pid())
    tally = Tally()
    consumers = [AmqpConsumer(cluster, results, tally), AmqpConsumer(cluster, statuses, tally)]

    def outage() -> dict[str, Any]:
        before = connections_per_port(cluster.mqtt_ports)
        victim = max(cluster.nodes, key=lambda n: before[n.mqtt_port])
        survivors = [n.mqtt_port for n in cluster.nodes if n is not victim]
        started = time.monotonic()
        cluster.kill(victim)
        moved = _wait(lambda: sum(connections_per_port(survivors).values()) >= sum(before.values()), timeout=60)
        failover_s = time.monotonic() - started
        time.sleep(max(0.0, started + 3 - time.monotonic()))
        restarted = time.monotonic()
        cluster.start(victim)
        sampler.watch(f"rabbitmq-node{victim.index + 1}-restarted", victim.beam_pid())
        after = connections_per_port(cluster.mqtt_ports)
        return {
            "outage": f"SIGKILL of node {victim.index + 1} (the most MQTT connections), restart 3 s later",
            "connections_before": {f"node{n.index + 1}": before[n.mqtt_port] for n in cluster.nodes},
            "all_connected_to_survivors_after_s": round(failover_s, 1) if moved else None,
            "node_back_after_s": round(time.monotonic() - restarted, 1),
            "connections_after": {f"node{n.index + 1}": after[n.mqtt_port] for n in cluster.nodes},
        }

    def inspect(lost: set[tuple[str, int]]) -> str:
        """Whether the lost results are still in the quorum queue (the reader missed them) or gone (the broker
        lost them), and each queue's counts and replicas."""
        for consumer in consumers:
            consumer.close()
        left = {(m["device_id"], m["index"]) for m in map(json.loads, cluster.drain(results))}
        queues = cluster.ctl(next(n for n in cluster.nodes if n.running), "list_queues", "name", "messages",
                             "messages_unacknowledged", "leader", "members", "online", timeout=30)  # fmt: skip
        return f"{len(lost & left)} of the {len(lost)} lost results are still in {results}:\n{queues}"

    hosts = [f"127.0.0.1:{port}" for port in cluster.mqtt_ports]
    try:
        run_fleet(
            tmp_path,
            astronaut_bgr,
            "rabbitmq-cluster",
            tally,
            sampler,
            outage,
            hosts=hosts,
            protocol="3.1.1",
            rotate=True,
            inspect=inspect,
        )
    finally:
        for consumer in consumers:
            consumer.close()
        sampler.close()
        cluster.heal()
        for queue in (results, statuses):
            with contextlib.suppress(Exception):
                cluster.delete_queue(queue)


def run_fleet(
    work: Path,
    photo: np.ndarray,
    label: str,
    tally: Tally,
    sampler: Sampler,
    outage: Callable[[], dict[str, Any]],
    *,
    hosts: list[str],
    protocol: str,
    rotate: bool,
    inspect: Callable[[set[tuple[str, int]]], str] | None = None,
) -> dict[str, Any]:
    """Daemons and fleet up, publish, `outage()` at OUTAGE_AT_S, publish until RUN_S, drain, count, assert.

    After a loss, `inspect(lost)` says what the broker still holds of the lost results."""
    clip = write_clip(work / "clip.mp4", photo, DAEMON_FRAMES, fps=DAEMON_FPS)
    mqtt: dict[str, Any] = {"hosts": hosts, "protocol": protocol}
    daemons: dict[str, DaemonProcess] = {}
    for n in range(1, DAEMONS + 1):
        name = f"daemon-{n}"
        config = write_daemon_config(work / f"{name}.yaml", name, mqtt, clip)
        daemons[name] = DaemonProcess(config, exit_when_done=True, drain_timeout=120)
        sampler.watch(name, daemons[name].process.pid)
    fleet = Fleet.start(PROCESSES, BOXES_PER_PROCESS, hosts, work, rate=RATE, protocol=protocol, rotate=rotate)
    try:
        fleet.wait_ready(timeout=180)
        ready = time.monotonic()
        time.sleep(max(0.0, ready + OUTAGE_AT_S - time.monotonic()))
        outage_at = time.time()
        extra = outage()
        time.sleep(max(5.0, ready + RUN_S - time.monotonic()))
        extra["publishing_s"] = round(time.monotonic() - ready, 1)
        reports = fleet.stop(timeout=180)
        for name, daemon in daemons.items():
            assert daemon.wait(180) == 0, f"{name} exited with {daemon.process.returncode}:\n{daemon.log[-3000:]}"
        expected = expected_results(reports, dict.fromkeys(daemons, DAEMON_FRAMES))
        tally.wait_for(expected, timeout=60)
        devices = {device for device, _ in expected}
        statuses_settled = _wait(lambda: _all_offline(tally, devices), timeout=30)
        figures = summarize(label, tally, expected, reports, sampler, daemons, extra)

        def explain() -> str:
            lost = expected - tally.snapshot().keys()
            text = explain_losses(lost, fleet.ledgers(), daemons, outage_at)
            return f"{text}\n{inspect(lost)}" if inspect is not None else text

        check(figures, reports, daemons, explain)
        tally.validate_samples()
        last = tally.statuses_now()
        online = sorted(d for d in devices if last.get(d) != "offline")
        assert statuses_settled, f"{len(online)} devices whose last status is not 'offline': {online[:5]}"
        return figures
    finally:
        fleet.close()
        for daemon in daemons.values():
            if daemon.process.poll() is None:
                daemon.process.kill()
                daemon.wait(10)


class MqttConsumer:
    """A persistent session (fixed client id, clean_session False) on every result and status topic: what the
    broker queued for it while it was away is delivered when it is back, and a message is acknowledged only
    after the tally has it."""

    def __init__(self, host: str, port: int, tally: Tally) -> None:
        self._tally = tally
        self._subscribed = threading.Event()
        self._client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id="fleet-consumer",
            clean_session=False,
            protocol=MQTTProtocolVersion.MQTTv311,
        )
        self._client.on_connect = lambda c, *_: c.subscribe([("edge/+/+/result", 1), ("edge/+/status", 1)])
        self._client.on_subscribe = lambda *_: self._subscribed.set()
        self._client.on_message = self._on_message
        self._client.reconnect_delay_set(1, 1)
        self._client.connect(host, port)
        self._client.loop_start()
        assert self._subscribed.wait(10), f"the consumer could not subscribe on {host}:{port}"

    def _on_message(self, client: paho.Client, userdata: object, message: paho.MQTTMessage) -> None:
        if message.topic.endswith("/status"):
            self._tally.add_status(message.topic.split("/")[1], message.payload.decode())
        else:
            self._tally.add(message.payload)

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


class AmqpConsumer:
    """Reads a quorum queue with manual acknowledgements, from the first running node, and moves to another
    node if its own dies: a message is acknowledged only once counted, so the consumer itself loses none
    (those it held unacknowledged come again, as duplicates)."""

    def __init__(self, cluster: RabbitMqCluster, queue: str, tally: Tally) -> None:
        self._cluster, self._queue, self._tally = cluster, queue, tally
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"amqp-{queue}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            node = self._cluster.nodes[attempt % len(self._cluster.nodes)]
            attempt += 1
            if not node.running:
                self._stop.wait(0.05)
                continue
            with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                self._consume(node.amqp_port)
            self._stop.wait(0.5)

    def _consume(self, port: int) -> None:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=10))
        try:
            channel = connection.channel()
            channel.basic_qos(prefetch_count=500)
            unacked, counted = 0, 0
            for method, _, body in channel.consume(self._queue, inactivity_timeout=0.3):
                if method is not None:
                    self._handle(method.routing_key, body)
                    unacked, counted = unacked + 1, method.delivery_tag
                if unacked and (method is None or unacked >= 200):
                    # Up to the last one counted, never "all delivered" (tag 0): pika holds deliveries the
                    # loop has not reached yet, and they would be lost if this connection died next.
                    channel.basic_ack(delivery_tag=counted, multiple=True)
                    unacked = 0
                if self._stop.is_set():
                    break
        finally:
            with contextlib.suppress(Exception):
                connection.close()

    def _handle(self, routing_key: str, body: bytes) -> None:
        if routing_key.endswith(".status"):
            self._tally.add_status(routing_key.split(".")[1], body.decode())
        else:
            self._tally.add(body)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _mosquitto_pid(broker: Mosquitto) -> int:
    process = broker._process
    assert process is not None, "mosquitto is not running"
    return process.pid


def _all_offline(tally: Tally, devices: set[str]) -> bool:
    statuses = tally.statuses_now()
    return all(statuses.get(d) == "offline" for d in devices)


def _wait(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
