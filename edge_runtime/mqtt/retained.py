"""State messages where only the latest value counts: a rollout's progress, say. Published straight away,
never through the spool, and again at the start of every new broker session.

Results go through the spool, which delivers at least once and may send an old message again after a
restart, after newer ones. For a result that is a duplicate a consumer counts; for a retained state it
would leave the broker holding a stale state ("downloading" after "rolled_back"). So a state is published
directly on the connection, in order with the states before it, and the latest value of every state is
published again whenever a new session begins, which also makes good any state lost with a dropped
connection. After a restart the daemon puts its states again from what it keeps on disk.

A state is deleted by putting an empty payload, which makes the broker drop its retained copy; the empty
value stays the latest, so a session that begins later deletes it too. `clear_under` deletes every state
under one topic level: a pipeline removed on reload leaves no model, count or occupancy behind, and one
changed on reload leaves none of the zones or lines it no longer has (only what was put before `mark`).
"""

from __future__ import annotations

import threading

from edge_runtime.mqtt.connection import MqttConnection

__all__ = ["RetainedStates"]


class RetainedStates:
    def __init__(self, connection: MqttConnection) -> None:
        self.connection = connection
        self._latest: dict[str, bytes] = {}
        self._puts = 0  # states put so far
        self._put_as: dict[str, int] = {}  # by topic: which put its latest value was
        self._session = -1  # the connect_count whose session has every latest state
        self._lock = threading.Lock()

    def put(self, topic: str, payload: bytes) -> None:
        with self._lock:
            self._latest[topic] = payload
            self._puts += 1
            self._put_as[topic] = self._puts
            if self._session == self.connection.connect_count:
                self.connection.publish(topic, payload, qos=1, retain=True)

    def mark(self) -> int:
        """A point in the sequence of puts, for `clear_under(level, before=...)`."""
        with self._lock:
            return self._puts

    def clear_under(self, level: str, before: int | None = None) -> None:
        """Delete every state under `level` (`<prefix>/<device_id>/<pipeline>`) that is not empty already;
        with `before` (a `mark`), only those whose latest value was put before it."""
        prefix = f"{level}/"
        with self._lock:
            topics = [
                topic
                for topic, payload in self._latest.items()
                if payload and topic.startswith(prefix) and (before is None or self._put_as[topic] <= before)
            ]
        for topic in topics:
            self.put(topic, b"")

    @property
    def in_session(self) -> bool:
        """Whether the current session has every latest state (the connection is up and `refresh` ran for it)."""
        with self._lock:
            return self.connection.connected and self._session == self.connection.connect_count

    def resend(self) -> None:
        """Publish every latest state again now, in this session: for a subscriber that asks to hear them
        again (Home Assistant after it restarts) rather than for a new session of the box."""
        with self._lock:
            if self._session != self.connection.connect_count or not self.connection.connected:
                return  # `refresh` sends them all once the session begins
            for topic, payload in self._latest.items():
                self.connection.publish(topic, payload, qos=1, retain=True)

    def refresh(self) -> None:
        """Publish every latest state once per new session; call it often, it does nothing otherwise."""
        with self._lock:
            session = self.connection.connect_count
            if session == self._session or not self.connection.connected:
                return
            for topic, payload in self._latest.items():
                self.connection.publish(topic, payload, qos=1, retain=True)
            self._session = session
