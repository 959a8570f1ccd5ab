"""Three daemons on one Mosquitto share the fleet's requests: each answered once, spread, and a killed box
costs only what it held.

The daemons run as real processes (serve-only, HTTP off, the tiny classifier) and take
`edge/fleet/infer/classifier` through `$share/workers/...`. The client is an MQTT 5 application with
one reply topic; every request carries its index as correlation data, and every answer names its box.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
import yaml
from broker import Mosquitto
from daemon_process import DaemonProcess
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from waiting import wait_for

from edge_runtime.mqtt.topics import Topics

BOXES = ("box-a", "box-b", "box-c")
GROUP = "workers"
QUEUE = 16  # max_queue_size of the one served model: the fleet connection's in-flight window
RATE = 100.0  # requests a second, well below what three boxes answer
REPLY_TOPIC = "app/fleet-answers"
FLEET_TOPIC = Topics("edge", "any").fleet_infer("classifier")
REQUEST = json.dumps(
    {"inputs": [{"name": "image", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": [0.5] * 3072}]}
).encode()
CLIENT_TIMEOUT_S = 5.0


@dataclass
class Answer:
    box: str
    ok: bool
    error: str | None = None  # the box's own words when it answered with an error


@dataclass
class FleetClient:
    """Sends numbered requests to the fleet and records each answer under its number."""

    broker: Mosquitto
    answers: dict[int, list[Answer]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._client = paho.Client(CallbackAPIVersion.VERSION2, protocol=MQTTProtocolVersion.MQTTv5)
        subscribed = threading.Event()
        self._client.on_subscribe = lambda *_: subscribed.set()
        self._client.on_message = self._on_message
        self._client.connect(self.broker.host, self.broker.port)
        self._client.loop_start()
        self._client.subscribe(REPLY_TOPIC, 1)
        assert subscribed.wait(5)
        self.sent = 0

    def _on_message(self, _client: Any, _userdata: Any, message: paho.MQTTMessage) -> None:
        properties = message.properties
        box = dict(getattr(properties, "UserProperty", [])).get("served_by", "?")
        body = json.loads(message.payload)
        ok = "outputs" in body and body["outputs"][0]["shape"] == [1, 10]
        error = None if ok else str(body.get("error", body))
        with self._lock:
            self.answers.setdefault(int(properties.CorrelationData), []).append(Answer(box, ok, error))

    def send(self) -> int:
        """One request at QoS 1; its number."""
        index, self.sent = self.sent, self.sent + 1
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.ResponseTopic = REPLY_TOPIC
        properties.CorrelationData = str(index).encode()
        properties.ContentType = "application/json"
        self._client.publish(FLEET_TOPIC, REQUEST, qos=1, properties=properties).wait_for_publish(5)
        return index

    def answered(self, indices: range) -> dict[int, list[Answer]]:
        with self._lock:
            return {i: list(self.answers[i]) for i in indices if i in self.answers}

    def wait_answered(self, indices: range, timeout: float = CLIENT_TIMEOUT_S) -> dict[int, list[Answer]]:
        """The answers to `indices` once all arrived, or once the client's timeout passed without them."""
        wait_for(lambda: len(self.answered(indices)) == len(indices), timeout)
        return self.answered(indices)

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    with Mosquitto(tmp_path_factory.mktemp("fleet-broker")) as mosquitto:
        yield mosquitto


@pytest.fixture(scope="module")
def daemons(
    broker: Mosquitto, batch_classifier: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, DaemonProcess]]:
    started: dict[str, DaemonProcess] = {}
    for box in BOXES:
        directory = tmp_path_factory.mktemp(box)
        config = {
            "device_id": box,
            "mqtt": {"host": broker.host, "port": broker.port},
            "state_dir": str(directory / "state"),
            "cache_dir": str(directory / "cache"),
            "serve": {
                "http": {"enabled": False},
                "share_group": GROUP,
                "models": [
                    {"name": "classifier", "path": str(batch_classifier), "batching": {"max_queue_size": QUEUE}}
                ],
            },
        }
        path = directory / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        started[box] = DaemonProcess(path)
    try:
        for box, daemon in started.items():
            assert wait_for(lambda d=daemon: "taking the fleet's requests" in d.log, 60), daemon.log
            assert wait_for(lambda b=box: f"as {b}-fleet " in broker.log(), 30), broker.log()
        yield started
    finally:
        for daemon in started.values():
            daemon.stop()


@pytest.fixture
def client(broker: Mosquitto, daemons: dict[str, DaemonProcess]) -> Iterator[FleetClient]:
    client = FleetClient(broker)
    first = client.sent
    while {a.box for answers in client.answered(range(first, client.sent)).values() for a in answers} != set(
        b for b, d in daemons.items() if d.process.poll() is None
    ):
        assert client.sent - first < 100, "not every box answers the fleet's requests"
        client.send()
        time.sleep(0.05)
    client.wait_answered(range(first, client.sent))  # every box subscribed; nothing of this left in flight
    yield client
    client.close()


def send_steadily(client: FleetClient, count: int, at: dict[int, Any] | None = None) -> range:
    """`count` requests at RATE; `at[n]()` runs just before the n-th of them, and may return a new callable."""
    first = client.sent
    start = time.monotonic()
    for n in range(count):
        action = (at or {}).get(n)
        if action is not None:
            action()
        client.send()
        time.sleep(max(0.0, start + (n + 1) / RATE - time.monotonic()))
    return range(first, client.sent)


def test_every_request_is_answered_once_and_the_boxes_share_the_load(client: FleetClient) -> None:
    sent = send_steadily(client, 300)
    answers = client.wait_answered(sent, timeout=20)
    assert sorted(answers) == list(sent), f"unanswered: {sorted(set(sent) - set(answers))}"
    assert all(len(a) == 1 for a in answers.values()), {i: a for i, a in answers.items() if len(a) > 1}
    assert all(a[0].ok for a in answers.values())
    per_box = Counter(a[0].box for a in answers.values())
    assert set(per_box) == set(BOXES) and min(per_box.values()) > 0.15 * len(sent), per_box


def test_a_box_killed_mid_load_costs_only_the_requests_it_held(
    client: FleetClient, broker: Mosquitto, daemons: dict[str, DaemonProcess]
) -> None:
    """box-a hangs (SIGSTOP) for 0.2 s, so that it holds requests, and is then killed (SIGKILL).

    It acknowledges a request only once answered, and its fleet connection asks for a window of QUEUE,
    so the broker never has more than QUEUE requests out at it; at this rate its turns in the round
    robin during the hang (about 7) fit in that window, so the broker queued none behind it. Its session
    ends with its connection, so every request published after the broker saw it go reaches box-b or box-c.
    """
    victim = daemons["box-a"]
    noticed: dict[str, int] = {}

    def gone() -> bool:  # "closed its connection", or after a reset "Socket error on client ..., disconnecting"
        lines = broker.log().splitlines()
        return any(
            "box-a-fleet" in line and ("closed its connection" in line or "disconnect" in line) for line in lines
        )

    def kill() -> None:
        victim.signal(signal.SIGKILL)
        victim.wait(10)

    def note_when_gone() -> None:
        assert wait_for(gone, 5), broker.log()
        noticed["first"] = client.sent

    sent = send_steadily(client, 300, at={100: lambda: victim.signal(signal.SIGSTOP), 120: kill, 121: note_when_gone})
    answers = client.wait_answered(sent, timeout=CLIENT_TIMEOUT_S)
    unanswered = sorted(set(sent) - set(answers))
    assert all(len(a) == 1 for a in answers.values()), {i: a for i, a in answers.items() if len(a) > 1}
    assert all(a[0].ok for a in answers.values())
    assert len(answers) + len(unanswered) == len(sent)
    assert 1 <= len(unanswered) <= QUEUE, unanswered
    assert all(i < noticed["first"] for i in unanswered), (unanswered, noticed)
    after = [answers[i][0].box for i in range(noticed["first"], sent.stop)]
    assert set(after) == {"box-b", "box-c"}, Counter(after)
    assert Counter(a[0].box for a in answers.values())["box-a"] > 0  # it did answer before it hung


def test_a_box_stopped_on_purpose_mid_load_loses_nothing(
    client: FleetClient, daemons: dict[str, DaemonProcess]
) -> None:
    """SIGTERM: the box leaves the share group, answers what it holds, and only then disconnects."""
    leaving = daemons["box-b"]
    sent = send_steadily(client, 200, at={50: lambda: leaving.signal(signal.SIGTERM)})
    assert leaving.wait(10) == 0, leaving.log
    answers = client.wait_answered(sent, timeout=10)
    unanswered = sorted(set(sent) - set(answers))
    assert not unanswered, f"unanswered: {unanswered}; box-b's log:\n{leaving.log[-3000:]}"
    wrong = {i: a for i, a in answers.items() if len(a) != 1 or not a[0].ok}
    logs = "\n".join(f"{box}'s log:\n{daemon.log[-3000:]}" for box, daemon in daemons.items())
    assert not wrong, f"answered more than once or with an error: {wrong}\n{logs}"
    per_box = Counter(a[0].box for a in answers.values())
    assert per_box["box-b"] > 0 and per_box["box-c"] > 100, per_box
