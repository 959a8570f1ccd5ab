from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker import BrokerTls, Mosquitto, Pki
from waiting import wait_for

from edge_runtime.errors import ConfigError
from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.settings import MqttSettings, TlsSettings

PASSWORD = "c0rrect-h0rse-Battery"


@pytest.fixture
def connections() -> Iterator[Callable[..., MqttConnection]]:
    """Make started connections; all are stopped after the test."""
    made: list[MqttConnection] = []

    def connect(broker: Mosquitto, device_id: str = "box-1", **settings: Any) -> MqttConnection:
        connection = MqttConnection(MqttSettings(**{"host": "127.0.0.1", "port": broker.port, **settings}), device_id)
        made.append(connection)
        connection.start()
        return connection

    yield connect
    for connection in made:
        connection.stop()


class Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []
        self.arrived = threading.Event()

    def __call__(self, topic: str, payload: bytes) -> None:
        self.messages.append((topic, payload))
        self.arrived.set()

    def wait_for(self, payload: bytes, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while payload not in [p for _, p in self.messages]:
            self.arrived.clear()
            if not self.arrived.wait(deadline - time.monotonic()) and time.monotonic() >= deadline:
                return False
        return True


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
def test_publish_and_subscribe_roundtrip_at_qos1(
    mosquitto: Mosquitto, connections: Callable[..., MqttConnection], protocol: str
) -> None:
    watcher = mosquitto.subscribe_collect("edge/box-1/results")
    connection = connections(mosquitto, protocol=protocol)
    acked: list[int] = []
    connection.set_ack_handler(lambda mid, accepted: acked.append(mid) if accepted else None)
    inbox = Inbox()
    connection.subscribe("edge/box-1/cmd/#", 1, inbox)
    assert connection.wait_connected(5), connection.last_error

    mid = connection.publish("edge/box-1/results", b'{"n": 1}', qos=1)
    assert mid is not None
    assert watcher.wait_count(1)
    assert watcher.payloads() == [b'{"n": 1}']
    assert wait_for(lambda: mid in acked)

    assert connection.wait_subscribed(5)
    mosquitto.publish("edge/box-1/cmd/reload", b"now", qos=1)
    assert inbox.wait_for(b"now")
    assert inbox.messages == [("edge/box-1/cmd/reload", b"now")]
    assert connection.connected and connection.reconnects == 0 and connection.last_error == ""


def test_publish_returns_none_when_not_connected(tmp_path: Path) -> None:
    connection = MqttConnection(MqttSettings(host="127.0.0.1", port=1), "box-1")
    assert connection.publish("edge/box-1/results", b"x") is None


def test_status_online_retained_on_connect_and_will_offline_when_killed(
    mosquitto: Mosquitto, spawn: Callable[..., Any]
) -> None:
    watcher = mosquitto.subscribe_collect("edge/+/status")
    child = spawn("connect", str(mosquitto.port), "box-7")
    child.wait_line(lambda line: line == "connected")
    assert watcher.wait_until(lambda ms: any(m.payload == b"online" for m in ms))

    late = mosquitto.subscribe_collect("edge/box-7/status")  # retained: a late subscriber sees it too
    assert late.wait_count(1)
    assert (late.messages[0].payload, late.messages[0].retain) == (b"online", True)

    child.kill()  # no DISCONNECT: the broker publishes the will
    assert watcher.wait_until(lambda ms: ms[-1].payload == b"offline", timeout=10), watcher.payloads()
    after = mosquitto.subscribe_collect("edge/box-7/status")
    assert after.wait_count(1)
    assert (after.messages[0].payload, after.messages[0].retain) == (b"offline", True)


def test_clean_stop_says_offline(mosquitto: Mosquitto) -> None:
    watcher = mosquitto.subscribe_collect("edge/box-1/status")
    connection = MqttConnection(MqttSettings(host="127.0.0.1", port=mosquitto.port), "box-1")
    connection.start()
    assert connection.wait_connected(5)
    connection.stop()
    assert watcher.wait_until(lambda ms: [m.payload for m in ms] == [b"online", b"offline"])


def test_subscriptions_come_back_after_a_broker_restart(
    mosquitto: Mosquitto, connections: Callable[..., MqttConnection]
) -> None:
    connection = connections(mosquitto)
    inbox = Inbox()
    assert connection.wait_connected(5)
    connection.subscribe("edge/box-1/cmd", 1, inbox)
    assert connection.wait_subscribed(5)
    mosquitto.publish("edge/box-1/cmd", b"before", qos=1)
    assert inbox.wait_for(b"before")

    mosquitto.restart()  # no persistence: the broker forgot every subscription
    assert wait_for(lambda: not connection.connected, 5)
    assert wait_for(lambda: connection.connected, 10), connection.last_error
    assert connection.reconnects == 1
    assert connection.wait_subscribed(5)
    mosquitto.publish("edge/box-1/cmd", b"after", qos=1)
    assert inbox.wait_for(b"after")


SUBSCRIPTIONS_LOG = "edge_runtime.mqtt.subscriptions"
SUBSCRIBE_ONLY_TO_BOX_1 = {
    "defaultACLAccess": {
        "publishClientSend": True,
        "publishClientReceive": True,
        "subscribe": False,
        "unsubscribe": True,
    },
    "clients": [],
    "groups": [{"groupname": "anonymous", "roles": [{"rolename": "box-1"}]}],
    "roles": [{"rolename": "box-1", "acls": [{"acltype": "subscribePattern", "topic": "edge/box-1/#", "allow": True}]}],
    "anonymousGroup": "anonymous",
}


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
def test_a_subscription_the_broker_refuses_is_logged_with_its_topic_and_reason(
    tmp_path: Path, connections: Callable[..., MqttConnection], protocol: str
) -> None:
    # Mosquitto's acl_file grants every subscription and filters delivery; its dynamic security plugin
    # answers a denied subscription with a refusal, as brokers with subscribe ACLs do.
    security = tmp_path / "dynamic-security.json"
    security.write_text(json.dumps(SUBSCRIBE_ONLY_TO_BOX_1))
    library = next(Path("/usr/lib").glob("*/mosquitto_dynamic_security.so"))  # Debian's mosquitto package
    plugin = [f"plugin {library}", f"plugin_opt_config_file {security}"]
    with Mosquitto(tmp_path / "broker", listener_options=plugin) as broker, recording(SUBSCRIPTIONS_LOG) as log:
        connection = connections(broker, protocol=protocol)
        inbox = Inbox()
        connection.subscribe("edge/box-1/cmd", 1, inbox)
        connection.subscribe("edge/box-2/cmd", 1, inbox)
        assert connection.wait_subscribed(5)
        assert list(connection.subscriptions.refused) == ["edge/box-2/cmd"]
        said = [message for message in log.messages if "refused" in message]
        assert len(said) == 1 and "edge/box-2/cmd" in said[0] and "client box-1" in said[0], said
        broker.publish("edge/box-1/cmd", b"allowed", qos=1)
        assert inbox.wait_for(b"allowed")

        broker.restart()  # subscribed again in the new session: refused again, but said only once
        assert wait_for(lambda: not connection.connected, 5)
        assert connection.wait_subscribed(10)
        assert list(connection.subscriptions.refused) == ["edge/box-2/cmd"]
        assert len([message for message in log.messages if "refused" in message]) == 1


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
def test_persistent_session_delivers_what_came_while_offline(mosquitto: Mosquitto, protocol: str) -> None:
    settings = MqttSettings(host="127.0.0.1", port=mosquitto.port, protocol=protocol, client_id="box-1-session")
    first = MqttConnection(settings, "box-1")
    first.subscribe("edge/box-1/cmd", 1, Inbox())
    first.start()
    assert first.wait_subscribed(5)
    first.stop()

    mosquitto.publish("edge/box-1/cmd", b"queued while offline", qos=1)
    inbox = Inbox()
    second = MqttConnection(settings, "box-1")
    second.subscribe("edge/box-1/cmd", 1, inbox)
    second.start()
    try:
        assert inbox.wait_for(b"queued while offline")
    finally:
        second.stop()


# -- TLS and credentials ---------------------------------------------------------------------------


def tls(pki: Pki, *, require_certificate: bool = False) -> BrokerTls:
    return BrokerTls(pki.ca_cert, pki.server_cert, pki.server_key, require_certificate)


def test_tls_with_the_pinned_ca(
    pki: Pki, brokers: Callable[..., Mosquitto], connections: Callable[..., MqttConnection]
) -> None:
    broker = brokers(tls=tls(pki))
    watcher = broker.subscribe_collect("edge/box-1/results")
    connection = connections(broker, tls=TlsSettings(ca_file=pki.ca_cert))
    assert connection.wait_connected(5), connection.last_error
    assert connection.publish("edge/box-1/results", b"over tls") is not None
    assert watcher.wait_count(1)


def test_tls_with_a_wrong_ca_fails_clearly(
    pki: Pki, brokers: Callable[..., Mosquitto], connections: Callable[..., MqttConnection]
) -> None:
    with recording("edge_runtime.mqtt.connection") as recorder:
        broker = brokers(tls=tls(pki))
        connection = connections(broker, tls=TlsSettings(ca_file=pki.other_ca_cert))
        logged = lambda: any(str(pki.other_ca_cert) in message for message in recorder.messages)  # noqa: E731
        assert wait_for(lambda: "not trusted" in connection.last_error and logged(), 20), recorder.messages
    assert not connection.connected
    assert f"TLS certificate of broker 127.0.0.1:{broker.port} not trusted" in connection.last_error
    assert f"checked against pinned CA {pki.other_ca_cert}" in connection.last_error


class RecordingHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def recording(name: str) -> Iterator[RecordingHandler]:
    """The warnings of one logger, on a handler of its own: other libraries in the same test session
    (TensorFlow's absl logging, a dictConfig) may rearrange the root logger that pytest's caplog listens
    on, change its level, or disable loggers that existed before them."""
    logger = logging.getLogger(name)
    recorder = RecordingHandler()
    logger.addHandler(recorder)
    previous = logger.level, logger.disabled
    logger.setLevel(logging.WARNING)
    logger.disabled = False
    try:
        yield recorder
    finally:
        logger.removeHandler(recorder)
        logger.setLevel(previous[0])
        logger.disabled = previous[1]


def test_tls_checks_the_host_name(
    pki: Pki, brokers: Callable[..., Mosquitto], connections: Callable[..., MqttConnection]
) -> None:
    broker = brokers(tls=BrokerTls(pki.ca_cert, pki.misnamed_cert, pki.misnamed_key))  # for broker.example
    checked = connections(broker, "box-1", tls=TlsSettings(ca_file=pki.ca_cert))
    assert wait_for(lambda: checked.last_error != "")
    assert not checked.connected
    assert "not trusted" in checked.last_error and "127.0.0.1" in checked.last_error
    unchecked = connections(broker, "box-2", tls=TlsSettings(ca_file=pki.ca_cert, verify_hostname=False))
    assert unchecked.wait_connected(5), unchecked.last_error  # the chain is still checked against the CA


def test_missing_or_bad_tls_files_are_config_errors(tmp_path: Path, pki: Pki) -> None:
    missing = tmp_path / "nope" / "ca.pem"
    with pytest.raises(ConfigError, match=f"ca_file: file {missing} does not exist"):
        MqttConnection(MqttSettings(tls=TlsSettings(ca_file=missing)), "box-1")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=str(garbage)):
        MqttConnection(MqttSettings(tls=TlsSettings(ca_file=garbage)), "box-1")
    wrong_key = TlsSettings(ca_file=pki.ca_cert, cert_file=pki.client_cert, key_file=pki.server_key)
    with pytest.raises(ConfigError, match=str(pki.client_cert)):
        MqttConnection(MqttSettings(tls=wrong_key), "box-1")


def test_client_certificate_login(
    pki: Pki, brokers: Callable[..., Mosquitto], connections: Callable[..., MqttConnection]
) -> None:
    broker = brokers(tls=tls(pki, require_certificate=True))
    client_tls = TlsSettings(ca_file=pki.ca_cert, cert_file=pki.client_cert, key_file=pki.client_key)
    with_cert = connections(broker, "box-1", tls=client_tls)
    without_cert = connections(broker, "box-2", tls=TlsSettings(ca_file=pki.ca_cert))
    assert with_cert.wait_connected(5), with_cert.last_error
    assert wait_for(lambda: without_cert.last_error != "")
    assert not without_cert.connected
    assert f"127.0.0.1:{broker.port}" in without_cert.last_error
    # The broker's "certificate required" alert, or, when the broker's close lost it, the hint that names it.
    assert re.search("certificate required|requires a client certificate", without_cert.last_error), (
        without_cert.last_error
    )
    assert f"as box-1 (p5, c0, k30, u'{pki.client_cn}')" in broker.log()  # logged in by certificate CN


def test_password_login_and_a_wrong_password_reported_without_leaking_it(
    brokers: Callable[..., Mosquitto],
    connections: Callable[..., MqttConnection],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    broker = brokers(users={"box": PASSWORD})
    good = connections(broker, "box-1", username="box", password=PASSWORD)
    bad = connections(broker, "box-2", username="box", password="wrong-" + PASSWORD)
    anonymous = connections(broker, "box-3")
    assert good.wait_connected(5), good.last_error
    assert wait_for(lambda: bad.last_error != "" and anonymous.last_error != "")
    assert not bad.connected and not anonymous.connected
    assert bad.last_error.startswith(f"broker 127.0.0.1:{broker.port} refused the connection: ")
    assert "not authori" in bad.last_error.lower() or "user name or password" in bad.last_error.lower()
    records = "\n".join(f"{r.getMessage()} {r.args}" for r in caplog.records)
    assert "Sending CONNECT" in records  # paho's debug log was captured...
    assert PASSWORD not in records  # ...and never shows the password
    assert PASSWORD not in caplog.text
    assert PASSWORD not in repr(good.settings) and PASSWORD not in str(good.settings.model_dump())


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
def test_a_companion_takes_a_shared_subscription_again_after_a_restart_and_keeps_no_session(
    mosquitto: Mosquitto, protocol: str
) -> None:
    """Through `$share/...` a message still carries its plain topic; the companion's session ends with it."""
    watcher = mosquitto.subscribe_collect("edge/box-1/status")
    settings = MqttSettings(host="127.0.0.1", port=mosquitto.port, protocol=protocol)
    received: list[tuple[str, bytes]] = []

    def take(topic: str, payload: bytes, _properties: object, settle: Callable[[], None]) -> None:
        received.append((topic, payload))
        settle()

    def companion() -> MqttConnection:
        connection = MqttConnection(settings, "box-1", companion="fleet", window=4)
        connection.subscribe_requests("edge/fleet/infer/+", 1, take, share_group="g")
        connection.start()
        assert connection.wait_subscribed(5) and connection.client_id == "box-1-fleet"
        return connection

    first = companion()
    try:
        mosquitto.publish("edge/fleet/infer/m", b"before", qos=1)
        assert wait_for(lambda: received == [("edge/fleet/infer/m", b"before")], 5), received
        mosquitto.restart()
        assert wait_for(lambda: not first.connected, 5) and wait_for(lambda: first.connected, 10)
        assert first.wait_subscribed(5)
        mosquitto.publish("edge/fleet/infer/m", b"after", qos=1)
        assert wait_for(lambda: ("edge/fleet/infer/m", b"after") in received, 5), received
    finally:
        first.stop()
    mosquitto.publish("edge/fleet/infer/m", b"while gone", qos=1)
    companion().stop()
    assert ("edge/fleet/infer/m", b"while gone") not in received  # a persistent session would have kept it
    assert watcher.payloads() == []  # the status topic belongs to the main connection
