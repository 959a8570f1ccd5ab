"""Many boxes in one thread: the daemon's own connection, spool and publisher, driven by one selector loop.

A fleet test needs a thousand boxes on a two-core machine. Each real box runs three threads for its
broker traffic (paho's network loop, the publisher, the spool's flusher); here each box keeps the same
classes but none of those threads: `BoxDriver.run_once` watches every box's socket, reads and writes
what is ready, and gives each connection and publisher its turn.
"""

from __future__ import annotations

import json
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.publisher import Publisher
from edge_runtime.mqtt.settings import MqttSettings
from edge_runtime.mqtt.spool import Spool
from edge_runtime.mqtt.topics import Topics

TICK_S = 0.5  # keepalive and reconnect checks per box; the backoff's own delays are seconds long


class LedgerSpool(Spool):
    """The daemon's spool, noting when each message was put and when the broker acknowledged it: after a loss,
    what the box believed of each lost result (acknowledged or not, by which node, when) is on record."""

    def __init__(self, path: Path, **options: Any) -> None:
        super().__init__(path, **options)
        self.put_ids: list[int] = []  # in put order
        self.acked_at: dict[int, float] = {}  # spool id -> wall-clock time of its first acknowledgement

    def put(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int:
        message_id = super().put(topic, payload, qos, retain)
        self.put_ids.append(message_id)
        return message_id

    def ack(self, message_id: int) -> None:
        self.acked_at.setdefault(message_id, time.time())
        super().ack(message_id)


@dataclass
class SimulatedBox:
    device_id: str
    connection: MqttConnection
    spool: Spool
    publisher: Publisher
    topics: Topics
    produced: int = 0
    step_at: float = 0.0  # when the publisher asked to be called again
    tick_at: float = 0.0
    connects: list[tuple[float, str]] = field(default_factory=list)  # wall-clock time and node of each connect

    @classmethod
    def open(cls, device_id: str, settings: MqttSettings, spool_dir: Path) -> SimulatedBox:
        connection = MqttConnection(settings, device_id)
        spool = LedgerSpool(spool_dir / f"{device_id}.sqlite", background_flush=False)
        publisher = Publisher(connection, spool, settings.spool)
        box = cls(device_id, connection, spool, publisher, Topics(settings.topic_prefix, device_id))
        connection.add_connect_listener(lambda _: box.connects.append((time.time(), str(connection.broker))))
        return box

    def ledger(self) -> dict[str, Any]:
        """What this box knows of its results: when each (by index) was acknowledged, and where it connected."""
        assert isinstance(self.spool, LedgerSpool)
        acked_at = self.spool.acked_at
        return {
            "acked_at": [acked_at.get(message_id) for message_id in self.spool.put_ids],
            "connects": self.connects,
        }

    def publish_result(self, pipeline: str, message: dict[str, object]) -> None:
        self.publisher.publish(self.topics.result(pipeline), json.dumps(message).encode())
        self.produced += 1
        self.step_at = 0.0

    @property
    def settled(self) -> bool:
        stats = self.publisher.stats()
        return stats.spool_messages == 0 and stats.in_flight == 0

    def close(self) -> None:
        self.publisher.close(timeout=0)
        self.connection.stop()
        self.spool.close()


@dataclass
class BoxDriver:
    boxes: list[SimulatedBox]
    _selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    _watched: dict[str, tuple[object, int]] = field(default_factory=dict)

    def start(self) -> None:
        for box in self.boxes:
            box.connection.start(own_thread=False)

    def run_once(self, timeout: float = 0.02) -> None:
        """Wait up to `timeout` for any socket, serve what is ready, then give every box that is due its turn."""
        self._watch_sockets()
        for key, mask in self._selector.select(timeout):
            box: SimulatedBox = key.data
            if mask & selectors.EVENT_READ:
                box.connection.read()
                box.step_at = 0.0  # acknowledgements to settle
            if mask & selectors.EVENT_WRITE:
                box.connection.write()
        now = time.monotonic()
        for box in self.boxes:
            if now >= box.tick_at:
                box.connection.tick()
                box.tick_at = now + TICK_S
            if now >= box.step_at:
                box.step_at = now + box.publisher.step()

    def run_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.run_once()

    def run_until(self, condition: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                return False
            self.run_once()
        return True

    def _watch_sockets(self) -> None:
        for box in self.boxes:
            sock = box.connection.network_socket()
            watched = self._watched.get(box.device_id)
            if watched is not None and (sock is None or watched[0] is not sock):
                self._selector.unregister(watched[0])  # type: ignore[arg-type]
                del self._watched[box.device_id]
                watched = None
            if sock is None:
                continue
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if box.connection.wants_write else 0)
            if watched is None:
                self._selector.register(sock, events, box)
            elif watched[1] != events:
                self._selector.modify(sock, events, box)
            self._watched[box.device_id] = (sock, events)

    def close(self) -> None:
        """Stop every box: each says "offline" and waits for the broker's acknowledgement, as a daemon does."""
        for box in self.boxes:
            box.close()
        self._selector.close()
