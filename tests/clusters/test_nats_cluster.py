"""MQTT clients and the daemon against a real three-node NATS 2.9 cluster, read back through JetStream.

What these tests pin about nats-server 2.9.10 (server/mqtt.go, mqttProcessPub): a QoS 1 PUBLISH is
handed to core NATS, then stored in the internal `$MQTT_msgs` stream (interest retention, R3 here, a
quorum write), and only then PUBACKed. A user stream on the same subject receives the core NATS copy,
which only its leader listens for and which nobody waits for: while that stream has no leader (4-9 s
of Raft election after its leader is SIGKILLed, 10-20 ms during a graceful hand-over) a PUBACKed
message is simply not captured. A capture, a durable R3 consumer on `$MQTT_msgs` filtered to the
topic's `$MQTT.msgs.` subject, keeps every PUBACKed message through any one node's death, so a client
that re-sends whatever has no PUBACK yet loses nothing; that is what the daemon's results are read from.

Unless another consumer of `$MQTT_msgs` acks the same message, e.g. the one behind an MQTT QoS 1
subscription: its ack is replicated to its followers, and a follower whose replica of `$MQTT_msgs` has
not stored that message yet finds no interest in it (it cannot load it), fails to remove it, and
forwards a delete to the stream leader, which removes it from every replica (server/stream.go, ackMsg,
the ErrStoreEOF branch; 2.9.16 keeps such an ack on that replica instead). Measured here with an
auto-acking QoS 1 subscriber beside a capture: 18 of 1,300 PUBACKed messages missing from the capture,
none with the subscriber not acking or with R1 MQTT consumers (`consumer_replicas: 1`).
"""

from __future__ import annotations

import collections
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as paho
import pytest
import yaml
from daemon_process import DaemonProcess, face_pipeline, write_clip
from nats_cluster import MQTT_MESSAGES, MQTT_STREAMS, NatsCluster
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from waiting import wait_for


@pytest.fixture
def cluster(nats_cluster: NatsCluster) -> NatsCluster:
    """The session's cluster with every node up again, whatever the test before did to it."""
    nats_cluster.heal()
    return nats_cluster


@pytest.fixture
def stream(cluster: NatsCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """An R3 stream named after the test, on the subject of MQTT topic `<name>/#`; deleted afterwards."""
    yield from _named_after_the_test(cluster, request, cluster.create_stream)


@pytest.fixture
def capture(cluster: NatsCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A capture (durable R3 consumer on `$MQTT_msgs`) named after the test, of MQTT topic `<name>/#`;
    deleted afterwards. The name doubles as the topic's first level."""
    yield from _named_after_the_test(cluster, request, cluster.create_capture)


def _named_after_the_test(
    cluster: NatsCluster, request: pytest.FixtureRequest, create: Callable[[str, str], object]
) -> Iterator[str]:
    name = re.sub(r"[^A-Za-z0-9]", "_", request.node.name)[-60:]
    cluster.delete(name)
    create(name, f"{name}/#")
    yield name
    cluster.heal()
    cluster.delete(name)


def connect(
    port: int, client_id: str, timeout: float = 15.0, manual_ack: bool = False
) -> tuple[paho.Client, threading.Event]:
    """A started MQTT 3.1.1 client (clean session, no automatic reconnect) and an event set when it drops;
    with `manual_ack` it PUBACKs nothing it receives unless told to."""
    client = paho.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=MQTTProtocolVersion.MQTTv311,
        manual_ack=manual_ack,
    )
    up, lost = threading.Event(), threading.Event()
    client.on_connect = lambda _c, _u, _f, reason, _p: None if reason.is_failure else up.set()
    client.on_disconnect = lambda *_: lost.set()
    client.connect("127.0.0.1", port, keepalive=10)
    client.loop_start()
    if not up.wait(timeout) or lost.is_set():
        client.loop_stop()
        raise ConnectionError(f"no CONNACK from the MQTT listener on port {port} in {timeout} s")
    return client, lost


class AckedPublisher:
    """Publishes 0..total-1 at QoS 1 from a thread; a number counts as sent only once its PUBACK arrived.

    When the connection drops it connects to the next node and sends again every number without a
    PUBACK, as a client that must lose nothing does; numbers may reach the stream twice.
    """

    def __init__(self, cluster: NatsCluster, topic: str, total: int, first: int, pace: float = 0.01) -> None:
        self.cluster, self.topic, self.total, self.first, self.pace = cluster, topic, total, first, pace
        self.acked: dict[int, tuple[int, float]] = {}  # number -> (node that PUBACKed it, when)
        self.sends = 0
        self.connections: list[int] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def wait_acked(self, count: int, timeout: float) -> bool:
        return wait_for(lambda: len(self.acked) >= count, timeout, interval=0.002)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"publisher still short of PUBACKs: {self.total - len(self.acked)}"

    def _run(self) -> None:
        node, deadline = self.first, time.monotonic() + 120
        while len(self.acked) < self.total and time.monotonic() < deadline:
            try:
                client, lost = connect(self.cluster.mqtt_ports[node], f"numbers-{time.monotonic_ns()}", timeout=10)
            except (ConnectionError, OSError):
                node = (node + 1) % len(self.cluster.nodes)
                time.sleep(0.2)
                continue
            self.connections.append(node)
            self._send_unacked(client, lost, node)
            self._await_acks(lost, deadline)
            client.disconnect()
            client.loop_stop()
            node = (node + 1) % len(self.cluster.nodes)

    def _await_acks(self, lost: threading.Event, deadline: float) -> None:
        wait_for(lambda: lost.is_set() or len(self.acked) >= self.total, max(0.0, deadline - time.monotonic()))

    def _send_unacked(self, client: paho.Client, lost: threading.Event, node: int) -> None:
        numbers: dict[int, int] = {}  # message id -> number, for this connection only

        def on_publish(_c: paho.Client, _u: Any, mid: int, _reason: Any, _properties: Any) -> None:
            with self._lock:
                number = numbers.get(mid)
                if number is not None and number not in self.acked:
                    self.acked[number] = (node, time.monotonic())

        client.on_publish = on_publish
        for number in range(self.total):
            if lost.is_set():
                return
            with self._lock:
                if number in self.acked:
                    continue
                numbers[client.publish(self.topic, str(number).encode(), qos=1).mid] = number
                self.sends += 1
            time.sleep(self.pace)


def keep_leaders_off(cluster: NatsCluster, node: int, groups: tuple[str, ...]) -> None:
    for name in groups:
        cluster.move_leader(name, lambda leader: leader != node)


def numbers_in(cluster: NatsCluster, name: str, via: int) -> collections.Counter[int]:
    return collections.Counter(int(m.data) for m in cluster.read(name, via=via))


def test_three_nodes_share_a_meta_leader_and_node_2_s_qos1_publish_is_read_through_node_3(
    cluster: NatsCluster, capture: str
) -> None:
    names = {n.name for n in cluster.nodes}
    for node in cluster.nodes:
        meta = cluster.monitor(node.index, "jsz")["meta_cluster"]
        assert meta["cluster_size"] == 3 and meta["leader"] in names, meta
        assert cluster.monitor(node.index, "routez")["num_routes"] == 2
    messages = cluster.info(MQTT_MESSAGES)["config"]
    assert (messages["retention"], messages["num_replicas"]) == ("interest", 3), messages
    info = cluster.info(capture)
    assert info["config"]["filter_subject"] == f"$MQTT.msgs.{capture}.>"
    assert {info["cluster"]["leader"]} | {r["name"] for r in info["cluster"]["replicas"]} == names

    client, _ = connect(cluster.mqtt_ports[1], "test-publisher")
    try:
        message = client.publish(f"{capture}/a/b", b"hello", qos=1)
        message.wait_for_publish(10)
        assert message.is_published()  # the PUBACK came
    finally:
        client.disconnect()
        client.loop_stop()
    stored = cluster.read(capture, via=2)
    assert [(m.subject, m.data) for m in stored] == [(f"$MQTT.msgs.{capture}.a.b", b"hello")]
    assert cluster.held(capture) == 0  # read means acked


@pytest.mark.parametrize("mqtt_streams_too", [False, True], ids=["capture-leader", "every-leader"])
def test_a_publisher_that_resends_everything_unacked_loses_nothing_in_a_capture_whose_leader_dies(
    cluster: NatsCluster, capture: str, mqtt_streams_too: bool
) -> None:
    """Node X leads the capture (and, the second time, `$MQTT_msgs` and `$MQTT_sess` too) and is SIGKILLed
    mid-stream: the scene that loses PUBACKed numbers from a plain stream (next test).

    A number PUBACKed anywhere is in `$MQTT_msgs` on a quorum, kept there for the capture, whose
    replicas elect a new leader that delivers it; every number without a PUBACK is sent again through
    the next node. So each of them is read from the capture, some perhaps twice.
    """
    x = 0
    cluster.move_leader(capture, lambda leader: leader == x)
    for name in MQTT_STREAMS:
        cluster.move_leader(name, lambda leader: (leader == x) == mqtt_streams_too)
    publisher = AckedPublisher(cluster, f"{capture}/numbers", 200, first=x)
    assert publisher.wait_acked(80, timeout=30)
    cluster.kill(x)
    killed_at = time.monotonic()
    publisher.join(90)
    cluster.start(x)
    counts = numbers_in(cluster, capture, via=x)  # through the restarted node: it has caught up
    acked_by_x = sum(node == x for node, _ in publisher.acked.values())
    print(
        f"\nX=nats-{x + 1} (MQTT streams too: {mqtt_streams_too}) PUBACKed {acked_by_x} before the kill; "
        f"connections {publisher.connections}; "
        f"{publisher.sends} PUBLISHes for 200 numbers, {sum(counts.values())} stored, "
        f"{sum(c - 1 for c in counts.values())} duplicates; last PUBACK "
        f"{max(t for _, t in publisher.acked.values()) - killed_at:.1f} s after the kill"
    )
    assert set(counts) == set(range(200)), f"missing: {sorted(set(range(200)) - set(counts))}"
    assert len(set(publisher.connections)) >= 2


def test_a_puback_does_not_mean_the_user_stream_has_it_while_that_stream_elects_a_leader(
    cluster: NatsCluster, stream: str
) -> None:
    """Node X leads a plain user stream on the topic's subject (not the MQTT streams) and is SIGKILLed
    mid-stream.

    The next node PUBACKs at once (`$MQTT_msgs` still has its leader), but until a new stream leader
    is elected nobody in the cluster listens on the subject, and core NATS drops what nobody listens
    to. The publisher, doing everything right, loses PUBACKed numbers, which is why results are read
    from a capture. Pinned, so that a NATS that starts waiting for the stream shows up here.
    """
    x = 0
    cluster.move_leader(stream, lambda leader: leader == x)
    keep_leaders_off(cluster, x, MQTT_STREAMS)
    publisher = AckedPublisher(cluster, f"{stream}/numbers", 200, first=x)
    assert publisher.wait_acked(80, timeout=30)
    cluster.kill(x)
    killed_at = time.monotonic()
    publisher.join(90)
    leader = cluster.leader(stream, via=(x + 1) % 3)
    cluster.start(x)
    counts = numbers_in(cluster, stream, via=x)
    lost = sorted(set(range(200)) - set(counts))
    after_kill = {n for n, (node, at) in publisher.acked.items() if node != x and at > killed_at}
    print(
        f"\nstream leader nats-{x + 1} killed, new leader nats-{leader + 1}; {len(lost)} of 200 PUBACKed numbers "
        f"lost, all PUBACKed by another node after the kill: {set(lost) <= after_kill}; "
        f"{sum(c - 1 for c in counts.values())} duplicates, connections {publisher.connections}"
    )
    assert len(publisher.acked) == 200 and leader != x
    assert lost, "every PUBACKed number reached the stream: NATS now waits for user streams, unpin this"
    assert set(lost) <= after_kill, "a number PUBACKed by the stream leader itself was lost"


def test_qos2_publish_closes_the_connection_and_a_qos2_subscription_is_granted_qos1(
    cluster: NatsCluster, capture: str
) -> None:
    """NATS 2.9 rejects QoS 2 in mqttParsePub ("publish QoS=2 not supported"): no PUBREC, no message,
    the connection is closed. A SUBSCRIBE asking for QoS 2 is downgraded to 1 in the SUBACK.

    The subscriber does not PUBACK what it receives: its ack could reach a replica of `$MQTT_msgs` before
    the message does and have the message deleted from every replica, the capture's too (module docstring).
    """
    subscriber, _ = connect(cluster.mqtt_ports[2], "test-qos2-subscriber", manual_ack=True)
    granted: list[int] = []
    received: list[tuple[bytes, int]] = []
    subscribed = threading.Event()

    def on_subscribe(_c: paho.Client, _u: Any, _mid: int, codes: list[Any], _p: Any) -> None:
        granted.extend(c.value for c in codes)
        subscribed.set()

    subscriber.on_subscribe = on_subscribe
    subscriber.on_message = lambda _c, _u, message: received.append((bytes(message.payload), message.qos))
    subscriber.subscribe(f"{capture}/#", qos=2)
    publisher, lost = connect(cluster.mqtt_ports[1], "test-qos2-publisher")
    try:
        assert subscribed.wait(10)
        assert granted == [1]
        info = publisher.publish(f"{capture}/exactly-once", b"qos2", qos=2)
        assert lost.wait(10), "NATS kept the connection after a QoS 2 PUBLISH"
        assert not info.is_published()

        again, _ = connect(cluster.mqtt_ports[1], "test-qos2-publisher-again")
        second = again.publish(f"{capture}/at-least-once", b"qos1", qos=1)
        second.wait_for_publish(10)
        assert second.is_published()
        again.disconnect()
        again.loop_stop()
        assert wait_for(lambda: received == [(b"qos1", 1)], 10), received  # at the granted QoS; no QoS 2 one
    finally:
        for client in (publisher, subscriber):
            client.disconnect()
            client.loop_stop()
    assert [m.data for m in cluster.read(capture)] == [b"qos1"]


def test_the_daemon_fails_over_across_the_nodes_and_every_result_reaches_the_capture(
    cluster: NatsCluster, astronaut_bgr: np.ndarray, tmp_path: Path
) -> None:
    """The daemon with `mqtt.hosts`: the node it is connected to, which leads both the results capture and
    `$MQTT_msgs`, is SIGKILLed mid-clip and restarted, then every node gets a graceful (lame duck)
    restart in turn, and the daemon runs on throughout.

    Results are read from a capture, not from a stream on `edge.test-box.faces.result`: such a stream
    misses what is PUBACKed while its leadership moves, for 4-9 s after a SIGKILL and even for some
    10-20 ms of each lame duck hand-over (measured: 2-3 PUBACKed messages lost per hand-over at 200
    messages/s), whereas the capture keeps each PUBACKed result through every one of these moves.
    """
    frames, name = 60, "daemon_results"
    cluster.delete(name)
    subject = cluster.create_capture(name, "edge/test-box/faces/result")
    cluster.move_leader(name, lambda leader: leader == 0)
    cluster.move_leader(MQTT_MESSAGES, lambda leader: leader == 0)
    keep_leaders_off(cluster, 0, MQTT_STREAMS[1:])
    clip = write_clip(tmp_path / "clip.mp4", astronaut_bgr, frames, fps=2.0)  # 30 s, paced like a camera
    config = {
        "device_id": "test-box",
        "mqtt": {"hosts": cluster.mqtt_hosts(), "protocol": "3.1.1", "client_id": "edge-nats-box"},
        "state_dir": str(tmp_path / "state"),
        "cache_dir": str(tmp_path / "cache"),
        "stats": {"interval_s": 1},
        "log_level": "info",
        "pipelines": [face_pipeline(clip, source={"type": "file", "path": str(clip), "realtime": True})],
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    daemon = DaemonProcess(tmp_path / "config.yaml", exit_when_done=True)
    try:
        assert wait_for(lambda: cluster.held(name) >= 4, 90, interval=0.5), daemon.log
        connected = connected_node(cluster, daemon.log)
        assert connected == 0, daemon.log
        cluster.kill(connected)
        assert wait_for(lambda: connected_node(cluster, daemon.log) != connected, 30, interval=0.2), daemon.log
        cluster.start(connected)
        for node in range(3):
            cluster.restart(node)
        assert daemon.process.poll() is None, f"the daemon ended before the rolling restart did\n{daemon.log}"
        assert daemon.wait(120) == 0, daemon.log
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.wait(10)
    assert "every result reached the broker" in daemon.log
    stored_messages = cluster.read(name, via=1)
    assert {m.subject for m in stored_messages} == {subject}
    messages = [json.loads(m.data) for m in stored_messages]
    ids: dict[int, set[str]] = collections.defaultdict(set)
    for message in messages:
        ids[int(message["index"])].add(str(message["id"]))
    moves = daemon.log.count("MQTT: connected to")
    print(
        f"\n{len(messages)} results stored for {frames} frames ({len(messages) - len(ids)} copies); "
        f"{moves} connections; distinct ids per frame: {collections.Counter(len(v) for v in ids.values())}"
    )
    assert set(ids) == set(range(frames)), f"missing frames: {sorted(set(range(frames)) - set(ids))}"
    assert all(len(v) == 1 for v in ids.values()), "a frame was inferred twice: the daemon restarted a pipeline"
    cluster.delete(name)


def connected_node(cluster: NatsCluster, log: str) -> int | None:
    """The node of the daemon's latest "MQTT: connected to 127.0.0.1:PORT" line."""
    found = re.findall(r"MQTT: connected to 127\.0\.0\.1:(\d+)", log)
    return cluster.mqtt_ports.index(int(found[-1])) if found else None


def test_a_qos2_pipeline_is_refused_at_start(cluster: NatsCluster, astronaut_bgr: np.ndarray, tmp_path: Path) -> None:
    """NATS 2.9 would close the connection at the first QoS 2 result; the daemon finds out before (its QoS 2
    subscription is granted QoS 1) and exits 2 naming the field."""
    clip = write_clip(tmp_path / "clip.mp4", astronaut_bgr, 5)
    config = {
        "device_id": "qos2-box",
        "mqtt": {"hosts": cluster.mqtt_hosts(), "protocol": "3.1.1"},
        "state_dir": str(tmp_path / "state"),
        "cache_dir": str(tmp_path / "cache"),
        "pipelines": [face_pipeline(clip, publish={"qos": 2})],
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    daemon = DaemonProcess(tmp_path / "config.yaml")
    assert daemon.wait(120) == 2, daemon.log
    assert "pipelines[0].publish.qos: 2, but broker 127.0.0.1:" in daemon.log
    assert "takes at most QoS 1 (it granted QoS 1 to a QoS 2 subscription)" in daemon.log
