"""The broker ACL the documentation gives (Brokers and clusters, "Access control"), on a real Mosquitto: boxes keep
to their own topics, operators command."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from broker import Mosquitto
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

BROKERS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "operating" / "brokers.md"
USERS = {"gate-3": "pw-3", "gate-4": "pw-4", "ops": "pw-ops"}


def documented_acl() -> str:
    """The code block that follows "**Broker ACLs.**" on the brokers page."""
    text = BROKERS_PAGE.read_text()
    section = text[text.index("**Broker ACLs.**") :]
    match = re.search(r"```\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


class Client:
    def __init__(self, broker: Mosquitto, user: str) -> None:
        self.received: list[tuple[str, bytes]] = []
        self._client = paho.Client(CallbackAPIVersion.VERSION2, client_id=user, protocol=MQTTProtocolVersion.MQTTv311)
        self._client.username_pw_set(user, USERS[user])
        self._client.on_message = lambda _c, _u, m: self.received.append((m.topic, bytes(m.payload)))
        connected = threading.Event()
        self._client.on_connect = lambda *_: connected.set()
        self._client.connect(broker.host, broker.port)
        self._client.loop_start()
        assert connected.wait(5)

    def subscribe(self, *topics: str) -> None:
        done = threading.Event()
        self._client.on_subscribe = lambda *_: done.set()
        self._client.subscribe([(topic, 1) for topic in topics])
        assert done.wait(5)

    def publish(self, topic: str, payload: bytes) -> None:
        self._client.publish(topic, payload, qos=1).wait_for_publish(5)

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    root = tmp_path_factory.mktemp("acl-broker")
    acl = root / "acl"
    acl.write_text(documented_acl())
    with Mosquitto(root, users=USERS, listener_options=[f"acl_file {acl}"]) as running:
        yield running


def test_only_operators_command_a_box_and_a_box_speaks_only_for_itself(broker: Mosquitto) -> None:
    box, other, ops = Client(broker, "gate-3"), Client(broker, "gate-4"), Client(broker, "ops")
    try:
        box.subscribe("edge/gate-3/command")
        other.subscribe("edge/gate-3/command", "edge/gate-3/#")  # another box must not read these
        ops.subscribe("edge/+/status", "edge/+/rollout/#", "edge-runtime-fleet/#")
        ops.publish("edge/gate-3/command", b"from ops")
        other.publish("edge/gate-3/command", b"from gate-4")
        box.publish("edge/gate-3/status", b"online")
        box.publish("edge/gate-3/rollout/r-1", b"committed")
        box.publish("edge-runtime-fleet/s-1/answers", b"answer")
        other.publish("edge/gate-3/status", b"offline")  # speaking in gate-3's name
        time.sleep(1.0)
        assert box.received == [("edge/gate-3/command", b"from ops")]
        assert other.received == []
        assert ops.received == [
            ("edge/gate-3/status", b"online"),
            ("edge/gate-3/rollout/r-1", b"committed"),
            ("edge-runtime-fleet/s-1/answers", b"answer"),
        ]
    finally:
        for client in (box, other, ops):
            client.close()
