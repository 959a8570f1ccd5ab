"""A real Mosquitto broker for tests, on free loopback ports, plus a test PKI made with the openssl CLI.

Each broker has two listeners: `port`, configured as the test asks (TLS, client certificates,
passwords), and `control_port`, plain and anonymous, which the helpers here use to watch topics
whatever the main listener demands.
"""

from __future__ import annotations

import getpass
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion


def mosquitto_binary() -> str:
    found = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not Path(found).is_file():
        raise RuntimeError("mosquitto is not installed (Debian: apt-get install mosquitto; `make test` does it)")
    return found


_handed_out: set[int] = set()


def free_port() -> int:
    """A free loopback port, never the same twice in a test session, below the kernel's ephemeral range.

    Never twice: a client a test left reconnecting to its broker's port must not reach a later test's broker
    there (and take its client id over). Below the ephemeral range: an outgoing connection cannot take the
    port between this check and the server's bind, nor while a server is down for a restart."""
    low, _ = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    while True:
        port = random.randrange(max(1024, low - 20000), low)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port


# -- PKI ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    server_cert: Path  # for 127.0.0.1 and localhost
    server_key: Path
    client_cert: Path  # CN = client_cn, signed by the CA
    client_key: Path
    client_cn: str
    other_ca_cert: Path  # a CA that signed nothing here: pinning it must fail
    misnamed_cert: Path  # signed by the CA, but for broker.example only: host name checks must fail
    misnamed_key: Path


def make_pki(directory: Path, client_cn: str = "edge-box-1") -> Pki:
    """EC P-256 certificates (fast to make) valid for two days, with the extensions strict verifiers want."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _make_ca(directory, "ca", "edge-runtime test CA")
    other_ca, _ = _make_ca(directory, "other-ca", "some other CA")
    server_cert, server_key = _make_leaf(
        directory, "server", "localhost", ca_cert, ca_key, "serverAuth", "subjectAltName=IP:127.0.0.1,DNS:localhost"
    )
    client_cert, client_key = _make_leaf(directory, "client", client_cn, ca_cert, ca_key, "clientAuth", "")
    misnamed_cert, misnamed_key = _make_leaf(
        directory, "misnamed", "broker.example", ca_cert, ca_key, "serverAuth", "subjectAltName=DNS:broker.example"
    )
    return Pki(
        ca_cert, server_cert, server_key, client_cert, client_key, client_cn, other_ca, misnamed_cert, misnamed_key
    )


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _make_ca(directory: Path, name: str, cn: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl(
        "req", "-x509", *_EC, "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={cn}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return cert, key


def _make_leaf(
    directory: Path, name: str, cn: str, ca_cert: Path, ca_key: Path, usage: str, extra: str
) -> tuple[Path, Path]:
    cert, key, csr, ext = (directory / f"{name}.{s}" for s in ("pem", "key", "csr", "ext"))
    lines = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
        "subjectKeyIdentifier=hash",
        "authorityKeyIdentifier=keyid",
    ]
    ext.write_text("\n".join([*lines, extra]) + "\n")
    _openssl("req", "-new", *_EC, "-keyout", key, "-out", csr, "-subj", f"/CN={cn}")
    serial = str(int.from_bytes(os.urandom(8), "big"))
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key, "-set_serial", serial,
        "-days", "2", "-out", cert, "-extfile", ext,
    )  # fmt: skip
    return cert, key


# -- the broker --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerTls:
    ca_cert: Path
    cert: Path
    key: Path
    require_certificate: bool = False  # client certificate login: the certificate's CN becomes the username


class Mosquitto:
    def __init__(
        self,
        directory: Path,
        *,
        tls: BrokerTls | None = None,
        users: Mapping[str, str] | None = None,
        persistence: bool = False,
        listener_options: Sequence[str] = (),
    ) -> None:
        self.directory = directory
        self.tls = tls
        self.users = dict(users or {})
        self.persistence = persistence
        self.listener_options = list(listener_options)  # extra lines for the main listener (acl_file, ...)
        self.port = free_port()
        self.control_port = free_port()
        self.host = "127.0.0.1"
        self.log_path = directory / "mosquitto.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._started_once = False  # a restart must keep its ports: clients reconnect to them
        self._collectors: list[Collector] = []
        directory.mkdir(parents=True, exist_ok=True)
        self.config_path = self._write_config()

    def _write_config(self) -> Path:
        lines = [
            f"user {getpass.getuser()}",  # as root, mosquitto would switch to a user that cannot read tmp dirs
            "per_listener_settings true",
            f"persistence {'true' if self.persistence else 'false'}",
            f"persistence_location {self.directory}/",
            "autosave_interval 1",
            "max_queued_messages 100000",  # for offline persistent subscribers, while a backlog drains
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
            f"listener {self.control_port} 127.0.0.1",
            "allow_anonymous true",
            f"listener {self.port} 127.0.0.1",
        ]
        if self.tls is not None:
            lines += [f"cafile {self.tls.ca_cert}", f"certfile {self.tls.cert}", f"keyfile {self.tls.key}"]
            if self.tls.require_certificate:
                lines += ["require_certificate true", "use_identity_as_username true"]
        if self.users:
            lines += [f"password_file {self._write_passwords()}", "allow_anonymous false"]
        else:
            lines.append("allow_anonymous true")
        lines += self.listener_options
        path = self.directory / "mosquitto.conf"
        path.write_text("\n".join(lines) + "\n")
        return path

    def _write_passwords(self) -> Path:
        path = self.directory / "passwords"
        path.unlink(missing_ok=True)
        tool = shutil.which("mosquitto_passwd")
        if tool is None:
            raise RuntimeError("mosquitto_passwd is missing (Debian package mosquitto)")
        for i, (user, password) in enumerate(self.users.items()):
            create = ["-c"] if i == 0 else []
            subprocess.run([tool, "-b", *create, str(path), user, password], check=True, capture_output=True)
        return path

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = 5.0) -> Mosquitto:
        """Start the broker; on a first start whose ports were taken meanwhile, try again on fresh ones."""
        for attempt in range(3):
            try:
                return self._start(timeout)
            except RuntimeError:
                if attempt == 2 or self._started_once or "Address already in use" not in self.log():
                    raise
                self.port, self.control_port = free_port(), free_port()
                self.config_path = self._write_config()
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> Mosquitto:
        if self.running:
            return self
        log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [mosquitto_binary(), "-c", str(self.config_path)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not (_accepts(self.port) and _accepts(self.control_port)):
            if self._process.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self._process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"mosquitto did not listen within {timeout}s:\n{self.log()}")
            time.sleep(0.01)
        self._started_once = True
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM: a clean shutdown (with persistence on, the database is written)."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def kill(self) -> None:
        """SIGKILL: the broker dies as a crashed or powered-off node does, saying nothing to its clients."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        for collector in self._collectors:
            collector.close()
        self._collectors.clear()
        self.stop()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def subscribe_collect(self, topic: str, qos: int = 1, *, client_id: str | None = None) -> Collector:
        """Watch `topic` over the control listener; with a client_id the session (and queue) outlives restarts."""
        collector = Collector(self.host, self.control_port, topic, qos, client_id)
        self._collectors.append(collector)
        return collector

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> None:
        """Publish once over the control listener and wait for the broker's ack."""
        client = paho.Client(CallbackAPIVersion.VERSION2, protocol=MQTTProtocolVersion.MQTTv5)
        client.connect(self.host, self.control_port)
        client.loop_start()
        try:
            client.publish(topic, payload, qos=qos, retain=retain).wait_for_publish(5)
        finally:
            client.disconnect()
            client.loop_stop()

    def __enter__(self) -> Mosquitto:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@dataclass
class Received:
    topic: str
    payload: bytes
    retain: bool


@dataclass
class Collector:
    """A paho subscriber that records what arrives; it reconnects by itself after broker restarts."""

    host: str
    port: int
    topic: str
    qos: int = 1
    client_id: str | None = None
    messages: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.RLock()  # conditions given to wait_until may call payloads()
        self._arrived = threading.Condition(self._lock)
        persistent = self.client_id is not None
        self._client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id or "",
            clean_session=not persistent,
            protocol=MQTTProtocolVersion.MQTTv311,
        )
        self._subscribed = threading.Event()
        self._client.on_connect = lambda c, *_: c.subscribe(self.topic, self.qos)
        self._client.on_subscribe = lambda *_: self._subscribed.set()
        self._client.on_message = self._on_message
        self._client.reconnect_delay_set(1, 1)
        self._client.connect(self.host, self.port)
        self._client.loop_start()
        if not self._subscribed.wait(5):
            raise RuntimeError(f"could not subscribe to {self.topic} on {self.host}:{self.port}")

    def _on_message(self, client: paho.Client, userdata: object, message: paho.MQTTMessage) -> None:
        with self._arrived:
            self.messages.append(Received(message.topic, bytes(message.payload), bool(message.retain)))
            self._arrived.notify_all()

    def payloads(self, topic: str | None = None) -> list[bytes]:
        with self._lock:
            return [m.payload for m in self.messages if topic is None or m.topic == topic]

    def wait_until(self, condition: Callable[[list[Received]], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._arrived:
            while not condition(self.messages):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._arrived.wait(remaining)
            return True

    def wait_count(self, count: int, timeout: float = 10.0) -> bool:
        return self.wait_until(lambda messages: len(messages) >= count, timeout)

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()
