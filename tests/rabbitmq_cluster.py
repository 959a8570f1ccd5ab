"""A real three-node RabbitMQ cluster on loopback, started once per test session, for broker failover tests.

The nodes are the Debian RabbitMQ install run as the `rabbitmq` user with everything of their own: node names
unique to this test session, ports, data and log directories, config file and Erlang cookie. The service that
may already run on the standard ports is never touched. Their directory lives under /tmp rather than pytest's
base temp, which is private to root and so unreadable by the `rabbitmq` user; logs are copied to a pytest temp
directory when the cluster closes.

Durable MQTT subscriptions (mqtt.durable_queue_type) and the queues tests read results from are quorum queues,
replicated on all three nodes, so a SIGKILLed node loses nothing the broker acknowledged.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika  # type: ignore[import-untyped]
import pytest
from broker import free_port

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
USER = "rabbitmq"
BOOT_TIMEOUT = 180.0  # a node rebooted after SIGKILL repairs its files first; two cores are slow at it


def routing_key(topic: str) -> str:
    """The AMQP routing key the MQTT plugin publishes `topic` with to amq.topic ('/' and '.' swap places)."""
    return topic.translate(str.maketrans("/.+", "./*"))


def mqtt_handshake(port: int, timeout: float = 2.0) -> bool:
    """Whether an MQTT 3.1.1 CONNECT on `port` is accepted: the listener is up and the client id tracker works."""
    client_id = f"probe-{secrets.token_hex(4)}".encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x0a" + len(client_id).to_bytes(2, "big") + client_id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(bytes([0x10, len(body)]) + body)
            connack = sock.recv(4)
            sock.sendall(b"\xe0\x00")
            return connack == b"\x20\x02\x00\x00"
    except OSError:
        return False


class ClusterError(RuntimeError):
    pass


@dataclass
class RabbitMqNode:
    index: int
    name: str  # edgetest-<pid>-<n>@localhost
    amqp_port: int
    mqtt_port: int
    dist_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.directory / "log" / f"{self.name}.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for path in (self.directory / "stdout.log", self.log_path):
            with contextlib.suppress(OSError):
                parts.append(f"--- {path}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(parts) or "(no log written)"

    def beam_pid(self) -> int:
        """The Erlang VM's pid: the child of the wrapper shell this fixture started (never another node's VM)."""
        if self.process is None:
            raise ClusterError(f"{self.name} is not running")
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        for child in map(int, children):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{child}/comm").read_text().strip() == "beam.smp":
                    return child
        raise ClusterError(f"{self.name}: no beam.smp process under {self.process.pid}")


class RabbitMqCluster:
    """Three clustered nodes; methods take a node or its index (0 for the node the others joined)."""

    def __init__(self, root: Path, size: int = 3) -> None:
        self.root = root
        self.home = root / "home"  # the Erlang cookie, shared by the nodes and rabbitmqctl
        self.nodes = [self._new_node(i) for i in range(size)]
        self.queues: set[str] = set()

    def _new_node(self, index: int) -> RabbitMqNode:
        name = f"edgetest-{os.getpid()}-{index + 1}@localhost"
        return RabbitMqNode(index, name, free_port(), free_port(), free_port(), self.root / f"node{index + 1}")

    @property
    def mqtt_ports(self) -> list[int]:
        return [n.mqtt_port for n in self.nodes]

    @property
    def amqp_ports(self) -> list[int]:
        return [n.amqp_port for n in self.nodes]

    def node(self, node: RabbitMqNode | int) -> RabbitMqNode:
        return self.nodes[node] if isinstance(node, int) else node

    # -- lifecycle ---------------------------------------------------------------------------------------

    def create(self) -> RabbitMqCluster:
        """Boots every node at once, then joins the others to the first one by one, as an operator would."""
        self._write_files()
        self._boot(self.nodes)
        first, *others = self.nodes

        for node in others:  # one at a time: nodes joining at once can stall their MQTT plugin's Raft election
            self.ctl(node, "stop_app")
            self.ctl(node, "join_cluster", first.name)
            self.ctl(node, "start_app", timeout=BOOT_TIMEOUT)
        self._await_rejoined(self.nodes)
        return self

    def kill(self, node: RabbitMqNode | int) -> None:
        """SIGKILL the node's Erlang VM, as a crash or power loss would end it: no goodbye to its peers."""
        target = self.node(node)
        os.kill(target.beam_pid(), signal.SIGKILL)
        self._reap(target)

    def stop(self, node: RabbitMqNode | int) -> None:
        """A graceful shutdown (rabbitmqctl stop): unlike kill(), clients are disconnected and peers told."""
        target = self.node(node)
        if not target.running:
            return
        self.ctl(target, "stop", check=False, timeout=60)
        self._reap(target, timeout=30)

    def start(self, *nodes: RabbitMqNode | int) -> None:
        """Boots stopped or killed nodes with their data; returns once each is back in the cluster, accepts
        MQTT connections and holds its replica of every quorum queue again."""
        targets = [self.node(n) for n in nodes]
        self._boot([n for n in targets if not n.running])
        self._await_rejoined(targets)

    def restart(self, node: RabbitMqNode | int) -> None:
        self.stop(node)
        self.start(node)

    def heal(self) -> None:
        """Starts whatever a test left stopped, so the next test begins with the whole cluster."""
        down = [n for n in self.nodes if not n.running]
        if down:
            self.start(*down)

    def close(self, keep_logs: Path | None = None) -> None:
        for node in self.nodes:
            if node.running:
                with contextlib.suppress(ClusterError, subprocess.SubprocessError):
                    self.ctl(node, "stop", check=False, timeout=20)
        for node in self.nodes:
            with contextlib.suppress(ClusterError):
                self._reap(node, timeout=20)
        if keep_logs is not None:
            for node in self.nodes:
                with contextlib.suppress(OSError):
                    shutil.copytree(node.directory / "log", keep_logs / node.name, dirs_exist_ok=True)
                    shutil.copy(node.directory / "stdout.log", keep_logs / node.name / "stdout.log")
        shutil.rmtree(self.root, ignore_errors=True)

    # -- rabbitmqctl -------------------------------------------------------------------------------------

    def ctl(self, node: RabbitMqNode | int, *args: str, check: bool = True, timeout: float = 60) -> str:
        """rabbitmqctl's output for `args` run against the node; raises ClusterError naming it on failure."""
        target = self.node(node)
        done = self._run_ctl(target, *args, timeout=timeout)
        if check and done.returncode != 0:
            raise ClusterError(
                f"rabbitmqctl {' '.join(args)} on {target.name} failed ({done.returncode}):\n"
                f"{done.stdout}{done.stderr}\n{target.log_tail()}"
            )
        return done.stdout

    def _run_ctl(self, node: RabbitMqNode, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        command = [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", node.name, *args]
        try:
            return subprocess.run(command, env=self._env(), user=USER, group=USER, extra_groups=[],
                                  capture_output=True, text=True, timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"rabbitmqctl {' '.join(args)} on {node.name} took over {timeout} s") from exc

    def running_nodes(self, seen_from: RabbitMqNode | int) -> list[str]:
        status = json.loads(self.ctl(seen_from, "cluster_status", "--formatter", "json", timeout=30))
        return list(status["running_nodes"])

    def quorum_queues(self, seen_from: RabbitMqNode | int) -> list[dict[str, Any]]:
        out = self.ctl(seen_from, "list_queues", "-q", "name", "type", "leader", "members", "online",
                       "--formatter", "json", timeout=30)  # fmt: skip
        return [q for q in json.loads(out or "[]") if q.get("type") == "quorum"]

    # -- AMQP: the quorum queues tests read results from ----------------------------------------------------

    @contextlib.contextmanager
    def channel(self, node: RabbitMqNode | int | None = None) -> Iterator[Any]:
        """A pika channel on `node`, or on the first running node."""
        target = self.node(node) if node is not None else next(n for n in self.nodes if n.running)
        params = pika.ConnectionParameters("127.0.0.1", target.amqp_port, connection_attempts=3, retry_delay=1)
        connection = pika.BlockingConnection(params)
        try:
            yield connection.channel()
        finally:
            with contextlib.suppress(Exception):
                connection.close()

    def declare_queue(self, name: str, topic: str, node: RabbitMqNode | int | None = None) -> str:
        """A quorum queue (replicated on every node) receiving what MQTT clients publish on `topic`."""
        with self.channel(node) as ch:
            ch.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum"})
            ch.queue_bind(name, "amq.topic", routing_key(topic))
        self.queues.add(name)
        return name

    def count(self, queue: str, node: RabbitMqNode | int | None = None) -> int:
        with self.channel(node) as ch:
            return int(ch.queue_declare(queue, passive=True).method.message_count)

    def drain(self, queue: str, node: RabbitMqNode | int | None = None) -> list[bytes]:
        """Takes every message now in the queue, in order."""
        bodies: list[bytes] = []
        with self.channel(node) as ch:
            while True:
                method, _, body = ch.basic_get(queue, auto_ack=True)
                if method is None:
                    return bodies
                bodies.append(body)

    def collect(
        self, queue: str, until: Callable[[list[bytes]], bool], timeout: float, node: RabbitMqNode | int | None = None
    ) -> list[bytes]:
        """Drains the queue until what arrived satisfies `until`, or `timeout` passes; returns all of it."""
        bodies: list[bytes] = []
        deadline = time.monotonic() + timeout
        while True:
            bodies += self.drain(queue, node)
            if until(bodies) or time.monotonic() > deadline:
                return bodies
            time.sleep(0.2)

    def purge(self, queue: str) -> None:
        with self.channel() as ch:
            ch.queue_purge(queue)

    def delete_queue(self, queue: str) -> None:
        with self.channel() as ch:
            ch.queue_delete(queue)
        self.queues.discard(queue)

    # -- internals ---------------------------------------------------------------------------------------

    def _env(self, node: RabbitMqNode | None = None) -> dict[str, str]:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8",
               "LC_ALL": "C.UTF-8", "ERL_EPMD_ADDRESS": "127.0.0.1"}  # fmt: skip
        if node is not None:
            env |= {
                "RABBITMQ_CONF_ENV_FILE": str(node.directory / "rabbitmq-env.conf"),
                "RABBITMQ_NODENAME": node.name,
                "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
                "RABBITMQ_NODE_PORT": str(node.amqp_port),
                "RABBITMQ_DIST_PORT": str(node.dist_port),
                "RABBITMQ_MNESIA_BASE": str(node.directory / "mnesia"),
                "RABBITMQ_LOG_BASE": str(node.directory / "log"),
                "RABBITMQ_CONFIG_FILE": str(node.directory / "rabbitmq.conf"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(node.directory / "enabled_plugins"),
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            }
        return env

    def _write_files(self) -> None:
        self.home.mkdir(parents=True)
        cookie = self.home / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(20).upper())
        cookie.chmod(0o400)
        for node in self.nodes:
            (node.directory / "mnesia").mkdir(parents=True)
            (node.directory / "log").mkdir()
            (node.directory / "rabbitmq-env.conf").write_text("")  # instead of /etc/rabbitmq's, for the service
            (node.directory / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
            (node.directory / "rabbitmq.conf").write_text(
                f"listeners.tcp.default = 127.0.0.1:{node.amqp_port}\n"
                f"mqtt.listeners.tcp.default = 127.0.0.1:{node.mqtt_port}\n"
                "mqtt.allow_anonymous = true\n"
                "mqtt.durable_queue_type = quorum\n"
                "loopback_users = none\n"
                "log.console = false\n"
                "log.file.level = info\n"
            )
        account = pwd.getpwnam(USER)
        self.root.chmod(0o755)
        for path in [self.root, *self.root.rglob("*")]:
            os.chown(path, account.pw_uid, account.pw_gid)

    def _boot(self, nodes: list[RabbitMqNode]) -> None:
        for node in nodes:
            with (node.directory / "stdout.log").open("ab") as out:
                node.process = subprocess.Popen(
                    [str(RABBITMQ_BIN / "rabbitmq-server")], env=self._env(node), user=USER, group=USER,
                    extra_groups=[], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True, cwd=node.directory,
                )  # fmt: skip
        with ThreadPoolExecutor(len(nodes) or 1) as pool:
            list(pool.map(self._await_startup, nodes))

    def _await_startup(self, node: RabbitMqNode) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT
        while time.monotonic() < deadline:
            if not node.running:
                code = node.process.returncode if node.process else None
                raise ClusterError(f"RabbitMQ node {node.name} exited ({code}) while booting:\n{node.log_tail()}")
            with contextlib.suppress(ClusterError):
                if self._run_ctl(node, "await_startup", "--timeout", "5", timeout=30).returncode == 0:
                    return
            time.sleep(0.5)
        raise ClusterError(f"RabbitMQ node {node.name} did not boot in {BOOT_TIMEOUT} s:\n{node.log_tail()}")

    def _await_rejoined(self, nodes: list[RabbitMqNode]) -> None:
        """Until every running node sees each of `nodes`, they take MQTT connections, and each quorum queue
        has a leader and its replicas on every running node online."""
        running = [n for n in self.nodes if n.running]
        names = {n.name for n in running}
        checks: list[tuple[str, Callable[[], bool]]] = [
            ("cluster membership", lambda: all({n.name for n in nodes} <= set(self.running_nodes(p)) for p in running)),
            ("MQTT listener", lambda: all(mqtt_handshake(n.mqtt_port) for n in nodes)),
            ("quorum queue replicas", lambda: all(
                q["leader"] in names and set(q["members"]) & names <= set(q["online"])
                for q in self.quorum_queues(nodes[0])
            )),
        ]  # fmt: skip
        deadline = time.monotonic() + BOOT_TIMEOUT
        for what, check in checks:
            while True:
                with contextlib.suppress(ClusterError, ValueError, KeyError):
                    if check():
                        break
                if time.monotonic() > deadline:
                    tails = "\n".join(n.log_tail() for n in nodes)
                    raise ClusterError(f"{', '.join(n.name for n in nodes)}: no {what} in {BOOT_TIMEOUT} s\n{tails}")
                time.sleep(0.3)

    def _reap(self, node: RabbitMqNode, timeout: float = 10) -> None:
        """Waits for the node's wrapper shell to exit, then SIGKILLs whatever is left in its process group."""
        if node.process is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.process.wait(timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(node.process.pid, signal.SIGKILL)
        node.process.wait(10)


@pytest.fixture(scope="session")
def rabbitmq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMqCluster]:
    """Three RabbitMQ 3.10 nodes with the MQTT plugin, clustered; fails (never skips) if one cannot start."""
    if not (RABBITMQ_BIN / "rabbitmq-server").is_file():
        pytest.fail(f"RabbitMQ is not installed at {RABBITMQ_BIN} (Debian: apt-get install rabbitmq-server)")
    cluster = RabbitMqCluster(Path(tempfile.mkdtemp(prefix=f"edgetest-rabbitmq-{os.getpid()}-")))
    try:
        try:
            cluster.create()
        except ClusterError as exc:
            pytest.fail(f"the RabbitMQ test cluster did not start: {exc}", pytrace=False)
        yield cluster
    finally:
        cluster.close(keep_logs=tmp_path_factory.mktemp("rabbitmq-logs"))
