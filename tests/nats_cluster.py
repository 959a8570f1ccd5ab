"""A real three-node NATS cluster (JetStream and MQTT on every node) on free loopback ports, for tests.

The nodes are nats-server processes, so a test can SIGKILL one mid-stream and see what a real cluster
does; what survives is read back through nats-py. nats-server 2.9 (server/mqtt.go, mqttProcessPub)
hands a QoS 1 PUBLISH on topic `a/b/c` to core NATS as subject `a.b.c`, then stores it as
`$MQTT.msgs.a.b.c` in the account's `$MQTT_msgs` stream (interest retention, R3 here), then PUBACKs.
A stream on `a.b.c` (`create_stream`) gets the core NATS copy, which only its leader listens for: a
PUBACKed message is lost while that stream changes leader. A capture (`create_capture`), a durable R3
consumer on `$MQTT_msgs` filtered to `$MQTT.msgs.a.b.c`, is interest every replica knows of, so each
PUBACKed message stays stored until the capture's reader acks it, whichever node dies. A stream
sourcing from `$MQTT_msgs` is no substitute: its source consumer lives only on the `$MQTT_msgs` leader,
and while it is set up again nothing holds interest, so `$MQTT_msgs` skips the message, and PUBACKs it.
One exception on nats-server before 2.9.16: an MQTT subscriber at QoS 1 is a second consumer on
`$MQTT_msgs`, and when its PUBACK reaches a replica that has not stored the message yet, that replica has
the message deleted from every copy, the capture's included (server/stream.go, `ackMsg`; fixed upstream
in ed9de4b0a). Tests that read a capture keep QoS 1 subscribers off its topics or leave their
messages unacknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import nats
import pytest
from broker import free_port
from nats.aio.client import Client as NatsClient
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

T = TypeVar("T")

MQTT_MESSAGES = "$MQTT_msgs"  # where NATS stores each QoS 1 PUBLISH before it PUBACKs
MQTT_STREAMS = (MQTT_MESSAGES, "$MQTT_sess")  # what a QoS 1 PUBLISH and a CONNECT wait for
MQTT_MESSAGES_PREFIX = "$MQTT.msgs."

NATS_SERVER = "/usr/sbin/nats-server"
CLUSTER_NAME = "edge-test"
BOOT_TIMEOUT = 90.0  # three JetStream nodes electing a meta leader on a busy two-core machine


def nats_server_binary() -> str:
    found = shutil.which("nats-server") or NATS_SERVER
    if not Path(found).is_file():
        raise RuntimeError("nats-server is not installed (Debian: apt-get install nats-server; `make test` does it)")
    return found


def mqtt_topic_to_subject(topic: str) -> str:
    """The NATS subject NATS gives an MQTT topic or filter: `/` separates tokens, `+` is `*`, `#` is `>`."""
    return ".".join({"+": "*", "#": ">"}.get(level, level) for level in topic.split("/"))


@dataclass(frozen=True)
class StoredMessage:
    seq: int
    subject: str
    data: bytes


@dataclass
class NatsNode:
    index: int
    name: str
    client_port: int
    route_port: int
    mqtt_port: int
    http_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def config_path(self) -> Path:
        return self.directory / "nats.conf"

    @property
    def log_path(self) -> Path:
        return self.directory / "nats.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class NatsNodeError(RuntimeError):
    """A node that did not start or rejoin: the message names it and ends with its log."""


class NatsCluster:
    """Three nats-server nodes `nats-1`..`nats-3`, addressed here by index 0..2."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.streams: set[str] = set()  # made here, as are the captures: a node is ready when current in each
        self.captures: set[str] = set()
        self.nodes: list[NatsNode] = []
        for index in range(3):
            directory = root / f"nats-{index + 1}"
            (directory / "jetstream").mkdir(parents=True, exist_ok=True)
            client, route, mqtt, http = (free_port() for _ in range(4))
            self.nodes.append(NatsNode(index, f"nats-{index + 1}", client, route, mqtt, http, directory))
        for node in self.nodes:
            node.config_path.write_text(self._config(node))

    def _config(self, node: NatsNode) -> str:
        routes = ", ".join(f"nats-route://127.0.0.1:{n.route_port}" for n in self.nodes if n is not node)
        # Lame duck mode is the graceful stop: the node hands its Raft leaderships over before it leaves.
        return f"""
server_name: {node.name}
listen: 127.0.0.1:{node.client_port}
http: 127.0.0.1:{node.http_port}
lame_duck_duration: "30s"
lame_duck_grace_period: "1s"
jetstream {{
  store_dir: "{node.directory / "jetstream"}"
  max_memory_store: 256MB
  max_file_store: 2GB
}}
cluster {{
  name: {CLUSTER_NAME}
  listen: 127.0.0.1:{node.route_port}
  routes: [{routes}]
}}
mqtt {{
  listen: 127.0.0.1:{node.mqtt_port}
  stream_replicas: 3
}}
"""

    @property
    def mqtt_ports(self) -> list[int]:
        return [n.mqtt_port for n in self.nodes]

    def mqtt_hosts(self) -> list[str]:
        return [f"127.0.0.1:{n.mqtt_port}" for n in self.nodes]

    # -- processes ---------------------------------------------------------------------------------

    def start_all(self) -> None:
        """Start every stopped node at once (a lone node waits for a meta leader it cannot elect alone)."""
        for node in self.nodes:
            if not node.running:
                self._spawn(node)
        for node in self.nodes:
            self.wait_ready(node.index)

    def heal(self) -> None:
        """Every node running and current, for a test that must not inherit an earlier test's damage."""
        self.start_all()

    def _spawn(self, node: NatsNode) -> None:
        with node.log_path.open("ab") as log:
            log.write(f"\n--- starting {node.name} at {time.strftime('%H:%M:%S')} ---\n".encode())
            log.flush()
            node.process = subprocess.Popen(
                [nats_server_binary(), "-c", str(node.config_path)], stdout=log, stderr=subprocess.STDOUT
            )

    def start(self, index: int, timeout: float = BOOT_TIMEOUT) -> None:
        """Start a stopped node and wait until it is back in the cluster, current and taking MQTT clients."""
        node = self.nodes[index]
        if not node.running:
            self._spawn(node)
        self.wait_ready(index, timeout)

    def kill(self, index: int) -> None:
        """SIGKILL: no lame duck, no flush, no leadership hand-over."""
        node = self.nodes[index]
        if node.process is not None and node.running:
            node.process.kill()
            node.process.wait(10)

    def stop(self, index: int, timeout: float = 20.0) -> None:
        """Lame duck mode (SIGUSR2): leaderships move away, clients are closed, then the process exits."""
        node = self.nodes[index]
        if node.process is None or not node.running:
            return
        node.process.send_signal(signal.SIGUSR2)
        try:
            node.process.wait(timeout)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait(10)
            raise NatsNodeError(
                f"{node.name} did not leave lame duck mode in {timeout} s:\n{node.log_tail()}"
            ) from None

    def restart(self, index: int) -> None:
        self.stop(index)
        self.start(index)

    def close(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                self.kill(node.index)

    # -- readiness ---------------------------------------------------------------------------------

    def wait_ready(self, index: int, timeout: float = BOOT_TIMEOUT) -> None:
        """Routes to both other nodes, current with the meta leader, an accepted MQTT CONNECT, and current in
        the MQTT streams and in each stream and capture made here (so that the next node to stop leaves
        every one of them a quorum).

        Not the full /healthz: nats-server 2.9.10 reports a node's own `$MQTT_rmsgs_<node>` consumer as
        not current (lag 2) for good after that node's second SIGKILL, and that consumer only serves
        retained messages.
        """
        node = self.nodes[index]
        deadline = time.monotonic() + timeout
        why = "not probed yet"
        while time.monotonic() < deadline:
            if not node.running:
                code = node.process.returncode if node.process else None
                raise NatsNodeError(f"{node.name} exited with status {code} while starting:\n{node.log_tail()}")
            why = self._not_ready(node)
            if not why:
                return
            time.sleep(0.25)
        raise NatsNodeError(f"{node.name} not ready after {timeout:.0f} s ({why}):\n{node.log_tail()}")

    def _not_ready(self, node: NatsNode) -> str:
        try:
            routes = self.monitor(node.index, "routez")
            if int(routes.get("num_routes", 0)) < len(self.nodes) - 1:
                return f"{routes.get('num_routes', 0)} routes"
            health = self.monitor(node.index, "healthz?js-server-only=true")
            if health.get("status") != "ok":
                return f"healthz: {health.get('error', health)}"
        except (OSError, ValueError) as err:
            return f"monitoring endpoint: {err}"
        refused = mqtt_connack(node.mqtt_port)  # the first CONNECT in the account creates the MQTT streams
        if refused:
            return refused
        for name in (*MQTT_STREAMS, *sorted(self.streams), *sorted(self.captures)):
            if not self._current_in(node, name):
                return f"not current in {name}"
        return ""

    def _current_in(self, node: NatsNode, name: str) -> bool:
        try:
            cluster: dict[str, Any] = self.info(name, node.index, timeout=2).get("cluster", {})
        except Exception:  # no answer yet: a node that just started may not take clients for a moment
            return False
        if cluster.get("leader") == node.name:
            return True
        return any(r.get("name") == node.name and r.get("current") for r in cluster.get("replicas", []))

    def monitor(self, index: int, endpoint: str) -> dict[str, Any]:
        """A monitoring endpoint's JSON; /healthz answers 503 with JSON when unhealthy, which is returned too."""
        url = f"http://127.0.0.1:{self.nodes[index].http_port}/{endpoint}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body: dict[str, Any] = json.loads(response.read())
        except urllib.error.HTTPError as err:
            body = json.loads(err.read())
        return body

    def index_of(self, server_name: str) -> int:
        return next(n.index for n in self.nodes if n.name == server_name)

    # -- JetStream ---------------------------------------------------------------------------------

    def _run(self, via: int, work: Callable[[NatsClient], Awaitable[T]]) -> T:
        """Run `work` on a fresh nats-py connection to node `via`, synchronously, closing it after."""

        async def session() -> T:
            async def quiet(_error: Exception) -> None:
                return None

            url = f"nats://127.0.0.1:{self.nodes[via].client_port}"
            nc = await nats.connect(url, allow_reconnect=False, connect_timeout=5, error_cb=quiet)
            try:
                return await work(nc)
            finally:
                await nc.close()

        return asyncio.run(session())

    def create_stream(self, name: str, topic: str, via: int = 0, replicas: int = 3) -> str:
        """A file-backed stream on the subject of `topic`, which gets the core NATS copy of each PUBLISH;
        returns that subject."""
        subject = mqtt_topic_to_subject(topic)
        config = StreamConfig(name=name, subjects=[subject], num_replicas=replicas, storage=StorageType.FILE)
        self._run(via, lambda nc: nc.jetstream(timeout=10).add_stream(config))
        self.streams.add(name)
        return subject

    def create_capture(self, name: str, topic: str, via: int = 0) -> str:
        """A durable R3 pull consumer `name` on `$MQTT_msgs` for what MQTT clients publish on `topic` from now
        on (what is stored already waits for some other consumer); returns its filter subject, `$MQTT.msgs.`
        and the topic's subject. Each message it matches stays stored until `read` acks it, through leader
        changes of the stream and of the consumer."""
        subject = MQTT_MESSAGES_PREFIX + mqtt_topic_to_subject(topic)
        config = ConsumerConfig(  # acks explicit, ack wait 30 s: the defaults
            durable_name=name, filter_subject=subject, deliver_policy=DeliverPolicy.NEW, num_replicas=3
        )
        self._run(via, lambda nc: nc.jetstream(timeout=10).add_consumer(MQTT_MESSAGES, config))
        self.captures.add(name)
        return subject

    def delete(self, name: str, via: int = 0) -> None:
        """Delete the stream or the capture `name`, whichever there is (the API answers an error for the other)."""
        for api in (f"$JS.API.STREAM.DELETE.{name}", f"$JS.API.CONSUMER.DELETE.{MQTT_MESSAGES}.{name}"):
            self._run(via, lambda nc, api=api: nc.request(api, b"", timeout=10))
        self.streams.discard(name)
        self.captures.discard(name)

    def _api(self, verb: str, name: str) -> str:
        if name in self.captures:
            return f"$JS.API.CONSUMER.{verb}.{MQTT_MESSAGES}.{name}"
        return f"$JS.API.STREAM.{verb}.{name}"

    def info(self, name: str, via: int = 0, timeout: float = 10.0) -> dict[str, Any]:
        """STREAM.INFO, or CONSUMER.INFO for a capture, as JSON: `cluster` (leader, replicas and whether each is
        current) included, and for a capture `num_pending` and `num_ack_pending`."""
        reply = self._run(via, lambda nc: nc.request(self._api("INFO", name), b"", timeout=timeout))
        answer: dict[str, Any] = json.loads(reply.data)
        return answer

    def held(self, name: str, via: int = 0) -> int:
        """How many messages a stream holds, or a capture holds for its reader."""
        info = self.info(name, via)
        if name in self.captures:
            return int(info["num_pending"]) + int(info["num_ack_pending"])
        return int(info["state"]["messages"])

    def leader(self, name: str, via: int = 0, timeout: float = 30.0) -> int:
        """The node leading a stream or capture, waiting while it has none (no leader, no answer to INFO)."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(nats.errors.TimeoutError):
                leader = self.info(name, via, timeout=2).get("cluster", {}).get("leader")
                if leader:
                    return self.index_of(str(leader))
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} has had no leader for {timeout} s")
            time.sleep(0.2)

    def move_leader(self, name: str, keep: Callable[[int], bool], via: int = 0, tries: int = 40) -> int:
        """Step the stream's or capture's leader down until `keep(leader index)` holds (2.9 cannot name the
        next leader). Only the leader answers a step-down, so one sent mid-election is answered by nobody.
        Each election picks at random, so a wanted node may take several: 40 tries miss one node of three
        with a chance of (2/3)^40, about 1e-7."""
        for _ in range(tries):
            leader = self.leader(name, via)
            if keep(leader):
                return leader
            with contextlib.suppress(nats.errors.TimeoutError):
                self._run(via, lambda nc: nc.request(self._api("LEADER.STEPDOWN", name), b"", timeout=5))
            time.sleep(1.0)
        raise AssertionError(f"{name} still has an unsuitable leader after {tries} step-downs")

    def read(self, name: str, via: int = 0, timeout: float = 60.0) -> list[StoredMessage]:
        """In order, everything in a stream (through an ephemeral consumer on node `via`) or everything a
        capture holds (each message acked once read, so `$MQTT_msgs` may drop it)."""

        async def read(nc: NatsClient) -> list[StoredMessage]:
            js = nc.jetstream(timeout=10)
            if name in self.captures:
                subscription = await js.pull_subscribe_bind(durable=name, stream=MQTT_MESSAGES)
            else:
                subjects = (await js.stream_info(name)).config.subjects or [">"]
                config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE, mem_storage=True)
                subscription = await js.pull_subscribe(subjects[0], stream=name, config=config)
            stored: list[StoredMessage] = []
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    messages = await subscription.fetch(256, timeout=2)
                except asyncio.TimeoutError:  # nats-py's own subclass, or asyncio's where the deadline ran out
                    # between the fetch's no-wait pull and its lingering one (nats-py 2.16, js/client.py)
                    info = await subscription.consumer_info()
                    if info.num_pending == 0 and info.num_ack_pending == 0:
                        await subscription.unsubscribe()
                        return stored
                    continue
                for message in messages:
                    stored.append(StoredMessage(message.metadata.sequence.stream, message.subject, message.data))
                    if name in self.captures:
                        await message.ack_sync(timeout=5)
            raise AssertionError(f"{name} still had messages for its reader after {timeout} s ({len(stored)} read)")

        return self._run(via, read)


def mqtt_connack(port: int, timeout: float = 5.0) -> str:
    """'' when an MQTT 3.1.1 CONNECT on `port` is accepted, else why not: NATS answers only once its
    MQTT session streams have a leader, which is the readiness that matters to MQTT clients."""
    client_id = f"probe-{time.monotonic_ns()}".encode()
    variable = b"\x00\x04MQTT\x04\x02\x00\x3c"  # protocol level 4, clean session, keepalive 60 s
    body = variable + len(client_id).to_bytes(2, "big") + client_id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(bytes([0x10, len(body)]) + body)
            answer = b""
            while len(answer) < 4:
                chunk = sock.recv(4 - len(answer))
                if not chunk:
                    return "MQTT listener closed the connection"
                answer += chunk
            sock.sendall(b"\xe0\x00")  # DISCONNECT
    except OSError as err:
        return f"MQTT listener: {err}"
    return "" if answer == b"\x20\x02\x00\x00" else f"MQTT CONNACK {answer.hex()}"


@pytest.fixture(scope="session")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """Booted once per session; every node is SIGKILLed at the end, also when a test or the boot failed."""
    cluster = NatsCluster(tmp_path_factory.mktemp("nats-cluster"))
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.close()
