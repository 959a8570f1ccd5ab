"""MQTT against a real three-node RabbitMQ 3.10 cluster whose nodes crash and restart under the publishers.

What these tests pin down about the broker, read from the 3.10.8 MQTT plugin (rabbit_mqtt_processor) and
checked here: a QoS 1 PUBLISH goes to amq.topic on a channel in publisher-confirm mode and its PUBACK is sent
only when the confirm comes back, which for a quorum queue means a majority of its replicas stored it; so a
PUBACKed message survives the loss of any one node, and a message without its PUBACK must be sent again. QoS 2
does not exist there: a QoS 2 PUBLISH is handled as QoS 1 (answered with PUBACK, no PUBREC) and a QoS 2
subscription is granted QoS 1.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as paho
import pytest
import yaml
from daemon_process import DaemonProcess, face_pipeline, write_clip
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from rabbitmq_cluster import RabbitMqCluster
from waiting import wait_for

RESULT_TOPIC = "edge/test-box/faces/result"


@pytest.fixture
def cluster(rabbitmq_cluster: RabbitMqCluster, request: pytest.FixtureRequest) -> Iterator[RabbitMqCluster]:
    """The session's cluster, whole again before each test; the test's queues are deleted after it."""
    rabbitmq_cluster.heal()
    before = set(rabbitmq_cluster.queues)
    yield rabbitmq_cluster
    rabbitmq_cluster.heal()
    for queue in rabbitmq_cluster.queues - before:
        rabbitmq_cluster.delete_queue(queue)


def connect(port: int, client_id: str, log: list[str] | None = None) -> paho.Client:
    """A plain MQTT 3.1.1 client (all RabbitMQ 3.10 speaks) with its network loop running."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=MQTTProtocolVersion.MQTTv311,
                         reconnect_on_failure=False)  # fmt: skip
    if log is not None:
        client.on_log = lambda _c, _u, _level, text: log.append(text)
    client.connect("127.0.0.1", port, keepalive=30)
    client.loop_start()
    assert wait_for(client.is_connected, 10), f"no CONNACK from 127.0.0.1:{port}"
    return client


def close(client: paho.Client) -> None:
    client.disconnect()
    client.loop_stop()


class FailoverPublisher(threading.Thread):
    """Publishes the numbers 0..count-1 at QoS 1, at most `window` of them awaiting their PUBACK; a number
    counts as sent only once PUBACKed. When the connection is lost it connects to the next node and sends
    again every number not yet acknowledged, as the daemon does with its spool."""

    def __init__(self, ports: list[int], topic: str, count: int, window: int = 20, pace_s: float = 0.002) -> None:
        super().__init__(daemon=True)
        self.ports, self.topic, self.count, self.window, self.pace_s = ports, topic, count, window, pace_s
        self.acked: set[int] = set()
        self.publishes = 0
        self.ports_used: list[int] = []
        self.error: str | None = None
        self._lock = threading.Condition()

    def run(self) -> None:
        deadline = time.monotonic() + 90
        attempt = 0
        while len(self.acked) < self.count:
            if time.monotonic() > deadline:
                self.error = f"only {len(self.acked)} of {self.count} acknowledged in 90 s"
                return
            self._session(self.ports[attempt % len(self.ports)])
            attempt += 1

    def _session(self, port: int) -> None:
        in_flight: dict[int, int] = {}  # MQTT message id -> number
        early: set[int] = set()  # PUBACKs that came before publish() returned the message id
        lost = threading.Event()

        def on_publish(_c: paho.Client, _u: Any, mid: int, _rc: ReasonCode, _p: Properties) -> None:
            with self._lock:
                if mid in in_flight:
                    self.acked.add(in_flight.pop(mid))
                else:
                    early.add(mid)
                self._lock.notify_all()

        def on_disconnect(*_: Any) -> None:
            lost.set()
            with self._lock:
                self._lock.notify_all()

        try:
            client = connect(port, "failover-publisher")
        except (OSError, AssertionError):
            return
        client.on_publish, client.on_disconnect = on_publish, on_disconnect
        self.ports_used.append(port)
        for number in [n for n in range(self.count) if n not in self.acked]:
            with self._lock:
                self._lock.wait_for(lambda: len(in_flight) < self.window or lost.is_set(), timeout=10)
            if lost.is_set() or not client.is_connected():
                break
            info = client.publish(self.topic, str(number).encode(), qos=1)
            self.publishes += 1
            with self._lock:
                if info.mid in early:
                    early.discard(info.mid)
                    self.acked.add(number)
                else:
                    in_flight[info.mid] = number
            time.sleep(self.pace_s)
        with self._lock:
            self._lock.wait_for(lambda: not in_flight or lost.is_set(), timeout=15)
        close(client)


def test_three_nodes_carry_an_mqtt_message_into_a_quorum_queue(cluster: RabbitMqCluster) -> None:
    """Published on one node, read on another: the nodes form one broker and the queue has three replicas."""
    status = json.loads(cluster.ctl(0, "cluster_status", "--formatter", "json"))
    names = {node.name for node in cluster.nodes}
    assert set(status["running_nodes"]) == names and set(status["disk_nodes"]) == names
    queue = cluster.declare_queue("carry", "sensors/+/temperature")
    (replicas,) = [q for q in cluster.quorum_queues(0) if q["name"] == queue]
    assert set(replicas["members"]) == names

    client = connect(cluster.nodes[1].mqtt_port, "carry-publisher")
    info = client.publish("sensors/kitchen/temperature", b"21.5", qos=1)
    info.wait_for_publish(10)
    close(client)
    assert info.is_published()
    assert cluster.collect(queue, lambda got: len(got) >= 1, timeout=10, node=2) == [b"21.5"]


def test_a_publisher_failing_over_after_a_node_crash_loses_nothing_acknowledged(
    cluster: RabbitMqCluster, record_property: Callable[[str, object], None]
) -> None:
    """The guarantee the daemon's spool relies on: what got its PUBACK is in the queue even if the node that
    sent the PUBACK dies right after; what did not, the client sends again (possibly twice, never lost)."""
    queue = cluster.declare_queue("failover", "numbers/failover")
    victim = cluster.nodes[1]
    ports = [victim.mqtt_port] + [n.mqtt_port for n in cluster.nodes if n is not victim]
    publisher = FailoverPublisher(ports, "numbers/failover", 200)
    publisher.start()
    assert wait_for(lambda: len(publisher.acked) >= 60, 30), publisher.error
    cluster.kill(victim)
    acked_at_kill = len(publisher.acked)
    publisher.join(100)
    assert publisher.error is None and len(publisher.acked) == 200, publisher.error
    assert acked_at_kill < 200 and publisher.ports_used[0] == victim.mqtt_port and len(publisher.ports_used) >= 2
    cluster.start(victim)

    bodies = cluster.collect(queue, lambda got: len({int(b) for b in got}) >= 200, timeout=30)
    arrived = Counter(int(b) for b in bodies)
    assert set(arrived) == set(range(200))
    duplicates = sum(arrived.values()) - 200
    record_property("duplicates", duplicates)
    print(f"\nkilled {victim.name} after {acked_at_kill} PUBACKs; {publisher.publishes} PUBLISHes through "
          f"{len(publisher.ports_used)} connections; {duplicates} duplicates in the queue")  # fmt: skip
    assert duplicates <= publisher.publishes - 200  # only numbers sent again can arrive twice


def test_puback_waits_until_a_majority_of_the_quorum_queue_has_the_message(cluster: RabbitMqCluster) -> None:
    """Why a PUBACK is worth waiting for: with two replicas of three stopped the message cannot commit, and
    the PUBACK is held back until they return, rather than sent when the node received it.

    The two nodes stop their RabbitMQ application (`stop_app`) rather than die: a node rebooted while
    another is still down can wait minutes for it before its MQTT plugin starts, which is RabbitMQ's
    matter, not this test's. Node crashes are what the other tests here do."""
    queue = cluster.declare_queue("majority", "held/message")
    client = connect(cluster.nodes[0].mqtt_port, "majority-publisher")
    for node in (1, 2):
        cluster.ctl(node, "stop_app")  # one replica of three left: no write can commit
    info = client.publish("held/message", b"held", qos=1)
    assert not wait_for(info.is_published, timeout=3), "PUBACK sent with only one replica of three running"
    for node in (1, 2):
        cluster.ctl(node, "start_app", timeout=180)
    assert wait_for(info.is_published, timeout=60), "no PUBACK once the replicas were back"
    close(client)
    assert cluster.collect(queue, lambda got: len(got) >= 1, timeout=10) == [b"held"]


def test_qos_2_is_served_as_qos_1(cluster: RabbitMqCluster) -> None:
    """RabbitMQ 3.10 downgrades QoS 2: PUBLISH is answered with PUBACK and SUBSCRIBE is granted QoS 1."""
    queue = cluster.declare_queue("qos2", "qos2/in")
    log: list[str] = []
    client = connect(cluster.nodes[0].mqtt_port, "qos2-client", log)
    granted: list[int] = []
    received: list[paho.MQTTMessage] = []
    client.on_subscribe = lambda _c, _u, _mid, codes, _p: granted.extend(code.value for code in codes)
    client.on_message = lambda _c, _u, message: received.append(message)
    client.subscribe("qos2/out", qos=2)
    assert wait_for(lambda: bool(granted), 10)
    info = client.publish("qos2/in", b"exactly once?", qos=2)
    info.wait_for_publish(10)
    client.publish("qos2/out", b"to the subscriber", qos=2).wait_for_publish(10)
    assert wait_for(lambda: bool(received), 10)
    close(client)

    assert granted == [1]
    assert info.is_published() and f"Received PUBACK (Mid: {info.mid})" in log
    assert not any("PUBREC" in line or "PUBCOMP" in line for line in log), log
    assert [(m.topic, m.qos, m.payload) for m in received] == [("qos2/out", 1, b"to the subscriber")]
    with cluster.channel() as channel:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
    assert method is not None and body == b"exactly once?"
    assert properties.headers["x-mqtt-publish-qos"] == 1 and properties.delivery_mode == 2


# -- the daemon -------------------------------------------------------------------------------------------


def connected_port(log: str) -> int | None:
    """The port of the node the daemon last said it connected to."""
    found = re.findall(r"MQTT: connected to 127\.0\.0\.1:(\d+)", log)
    return int(found[-1]) if found else None


def daemon_config(directory: Path, cluster: RabbitMqCluster, clip: Path, qos: int = 1) -> Path:
    source = {"type": "file", "path": str(clip), "realtime": True}
    hosts = [f"127.0.0.1:{port}" for port in cluster.mqtt_ports]
    config = {
        "device_id": "test-box",
        "mqtt": {"hosts": hosts, "protocol": "3.1.1", "client_id": "edge-test-box", "reconnect_max_s": 2},
        "state_dir": str(directory / "state"),
        "cache_dir": str(directory / "cache"),
        "stats": {"interval_s": 1},
        "log_level": "info",
        "pipelines": [face_pipeline(clip, source=source, publish={"qos": qos})],
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_daemon_delivers_every_result_through_a_node_crash_and_a_rolling_restart(
    cluster: RabbitMqCluster,
    astronaut_bgr: np.ndarray,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    """60 frames paced at 0.8 fps (75 s) outlast the crash, the restart and the rolling restart of all three
    nodes, which take about 40 s on a 2-core machine."""
    queue = cluster.declare_queue("daemon-results", RESULT_TOPIC)
    clip = write_clip(tmp_path / "clip.mp4", astronaut_bgr, 60, fps=0.8)
    daemon = DaemonProcess(daemon_config(tmp_path, cluster, clip), exit_when_done=True)
    try:
        bodies: list[bytes] = []
        bodies += cluster.collect(queue, lambda got: len(got) >= 5, timeout=60)
        assert len(bodies) >= 5, daemon.log
        port = connected_port(daemon.log)
        assert port is not None, daemon.log
        (victim,) = [n for n in cluster.nodes if n.mqtt_port == port]
        started = time.monotonic()
        cluster.kill(victim)
        assert wait_for(lambda: connected_port(daemon.log) not in (None, port), 30), daemon.log
        cluster.start(victim)
        for node in cluster.nodes:
            cluster.restart(node)
            assert daemon.process.poll() is None, daemon.log
        took = time.monotonic() - started
        assert daemon.wait(120) == 0, daemon.log
        assert "every result reached the broker" in daemon.log
        assert daemon.log.count("edge-runtime ready") == 1, daemon.log
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.wait(10)

    bodies += cluster.collect(queue, lambda got: len({json.loads(b)["index"] for b in bodies + got}) >= 60, 30)
    results = [json.loads(b) for b in bodies]
    ids_per_index: dict[int, set[str]] = {}
    for result in results:
        ids_per_index.setdefault(result["index"], set()).add(result["id"])
    assert set(ids_per_index) == set(range(60))
    copies = len(results) - len({r["id"] for r in results})
    reprocessed = sum(len(ids) - 1 for ids in ids_per_index.values())
    record_property("duplicate_copies", copies)
    record_property("frames_with_several_ids", reprocessed)
    moves = len(re.findall(r"MQTT: connected to", daemon.log)) - 1
    print(
        f"\n{len(results)} results for 60 frames: {copies} repeated copies, {reprocessed} extra ids; the daemon "
        f"connected {moves} more times after the first; crash to the end of the rolling restart: {took:.0f} s"
    )


def test_a_qos2_pipeline_is_refused_at_start_rather_than_downgraded(
    cluster: RabbitMqCluster, astronaut_bgr: np.ndarray, tmp_path: Path
) -> None:
    """RabbitMQ would take the QoS 2 results as QoS 1 without a word; the daemon finds out (the QoS 2
    subscription it is granted QoS 1) and exits 2 naming the field."""
    clip = write_clip(tmp_path / "clip.mp4", astronaut_bgr, 5)
    daemon = DaemonProcess(daemon_config(tmp_path, cluster, clip, qos=2))
    assert daemon.wait(120) == 2, daemon.log
    assert "pipelines[0].publish.qos: 2, but broker 127.0.0.1:" in daemon.log
    assert "takes at most QoS 1 (it granted QoS 1 to a QoS 2 subscription)" in daemon.log
