"""Results to the broker with at-least-once delivery: spool first, send from the spool, delete on ack.

Every QoS >= 1 message is put into the `Spool` before anything else and leaves it only when the broker
acknowledged it (PUBACK for QoS 1, PUBCOMP for QoS 2). One publisher thread moves messages from the
spool to the connection and keeps at most `max_in_flight` unacknowledged (or fewer, if an MQTT 5 broker
announces a smaller Receive Maximum).

Pacing comes from the spool, never from paho's in-memory queue: paho re-sends everything it holds at
once after a reconnect, whatever its in-flight limit. So while disconnected nothing is handed to paho
and results pile up in the spool; at each connect the connection drops paho's queue and this thread
starts a new session:

- everything in the spool at that moment is *backlog*, including messages that were in flight and never
  acknowledged; the backlog is re-sent oldest first at `drain_rate` messages per second;
- results put after the connect are *live* and are sent as fast as the window allows.

Live results go first because a dashboard wants the present before the past, but the backlog is never
starved: it takes its `drain_rate` share of the window before live results fill the rest, so both drain.
Re-sent messages may reach subscribers twice (the first copy arrived, its ack did not); consumers
dedupe by the result's own id. QoS 2 therefore means at-least-once here too.

QoS 0 messages bypass the spool: best effort, sent only while connected, counted in `dropped_qos0`
otherwise.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

from edge_runtime.errors import ConfigError
from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.settings import SpoolSettings
from edge_runtime.mqtt.spool import Spool, SpoolRecord

log = logging.getLogger(__name__)

_IDLE_WAIT_S = 0.1  # how long the thread sleeps with nothing to do, unless woken by a put, an ack or a connect
_BURST_S = 0.1  # the backlog may send this many seconds' worth of drain_rate at once


@dataclass(frozen=True)
class PublisherStats:
    spooled: int  # QoS >= 1 messages put into the spool by this publisher
    published: int  # handed to the connection, re-sends included
    acked: int
    rejected: int  # refused by an MQTT 5 broker (a failure reason code in PUBACK/PUBREC); deleted, not retried
    in_flight: int
    spool_messages: int
    spool_bytes: int
    dropped_full: int
    dropped_age: int
    dropped_qos0: int
    reconnects: int
    connected: bool
    broker: str  # the node connected to, or being tried
    broker_moves: int  # connections made to another node than the one before
    held_qos: int  # sends skipped because the broker takes a lower QoS than the message's; they stay spooled


class Publisher:
    def __init__(self, connection: MqttConnection, spool: Spool, settings: SpoolSettings) -> None:
        self._connection = connection
        self._spool = spool
        self._max_in_flight = settings.max_in_flight
        self._drain_rate = settings.drain_rate
        self._acks: deque[tuple[int, bool]] = deque()  # filled by paho's thread, emptied by ours
        self._wake = threading.Event()
        self._waiting_for_room = False  # the window is full: only an ack can let the thread send more
        self._stop = threading.Event()
        self._closing = False
        # Owned by the publisher thread only:
        self._in_flight: dict[int, int] = {}  # paho message id -> spool id
        self._session = 0  # the connection's connect_count we are sending for
        self._boundary = (0, 0)  # (connect_count, the spool's last id when that connect happened)
        self._backlog_after = 0  # backlog ids are in (backlog_after, backlog_through]
        self._backlog_through = 0
        self._backlog_left = False
        self._live_after = 0  # live ids are > live_after
        self._tokens = 0.0
        self._tokens_at = time.monotonic()
        self._spooled = self._published = self._acked = self._rejected = self._dropped_qos0 = 0
        self._held_qos = 0
        self._held_said = -1  # the session whose held messages were logged
        self._count_lock = threading.Lock()  # for the counters pipeline threads touch
        self._thread = threading.Thread(target=self._run, name="mqtt-publisher", daemon=True)
        connection.set_ack_handler(self._on_ack)
        connection.add_connect_listener(self._on_connect)

    def start(self) -> None:
        """Send from a thread of the publisher's own; without it, the owner calls `step` instead."""
        self._thread.start()

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> None:
        """Queue a result; never blocks on the network. Safe from any thread."""
        _check_topic(topic)
        if qos == 0:
            if self._connection.publish(topic, payload, qos=0, retain=retain) is None:
                with self._count_lock:
                    self._dropped_qos0 += 1
            return
        self._spool.put(topic, payload, qos, retain)
        with self._count_lock:
            self._spooled += 1
        if self._connection.connected:  # while disconnected the thread checks back on its own
            self._wake.set()

    def flush(self) -> None:
        """Make every result published so far durable now instead of within the spool's flush interval."""
        self._spool.flush()

    def drain(self, timeout: float) -> bool:
        """Wait until the spool is empty and nothing is in flight; False if that took longer than `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._wake.set()  # settle the acks that arrived since the thread's last turn
            self._spool.flush()
            if not self._in_flight and self._spool.depth.count == 0:
                return True
            time.sleep(0.01)
        return False

    def close(self, timeout: float = 5.0) -> None:
        """Stop sending, wait up to `timeout` for in-flight acks, and flush the spool; what is left stays there.

        Call it before `MqttConnection.stop()` and `Spool.close()`.
        """
        self._closing = True
        self._wake.set()
        deadline = time.monotonic() + timeout
        while self._in_flight and self._connection.connected and time.monotonic() < deadline:
            time.sleep(0.005)
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(1.0, timeout))
        self._spool.flush()

    def stats(self) -> PublisherStats:
        depth = self._spool.depth
        return PublisherStats(
            spooled=self._spooled,
            published=self._published,
            acked=self._acked,
            rejected=self._rejected,
            in_flight=len(self._in_flight),
            spool_messages=depth.count,
            spool_bytes=depth.bytes,
            dropped_full=self._spool.dropped_full,
            dropped_age=self._spool.dropped_age,
            dropped_qos0=self._dropped_qos0,
            reconnects=self._connection.reconnects,
            connected=self._connection.connected,
            broker=str(self._connection.broker),
            broker_moves=self._connection.broker_moves,
            held_qos=self._held_qos,
        )

    # -- the publisher thread ----------------------------------------------------------------------

    def _on_ack(self, mid: int, accepted: bool) -> None:
        # paho's thread, holding paho's message lock: only hand over; the publisher thread does the work.
        # Acks are settled at the thread's next turn; they wake it only when they open a full window, so a
        # busy pipeline costs one turn per result instead of one per result and one per ack.
        self._acks.append((mid, accepted))
        if self._waiting_for_room or self._closing:
            self._wake.set()

    def _on_connect(self, session: int) -> None:
        # paho's thread: what is in the spool at this instant is backlog, whatever comes later is live.
        self._boundary = (session, self._spool.last_id)
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                wait = self.step()
            except Exception:  # a spool that cannot be read (disk error): keep the thread, retry later
                log.exception("MQTT: publisher step failed; retrying in 1 s")
                wait = 1.0
            if wait:
                self._wake.wait(wait)
        self._settle_acks()

    def step(self) -> float:
        """One turn: settle acks, follow the connection, fill the window; how long to sleep (0: go on).

        The publisher's thread calls it in a loop; a process that drives many publishers in one thread
        calls it itself, and never calls `start`."""
        self._settle_acks()
        connected = self._connection.connected  # read before connect_count: see MqttConnection._on_connect
        if connected and self._connection.connect_count != self._session:
            self._begin_session(self._connection.connect_count)
        if not connected or self._closing:
            return _IDLE_WAIT_S
        return self._send_some()

    def _settle_acks(self) -> None:
        while self._acks:
            mid, accepted = self._acks.popleft()
            spool_id = self._in_flight.pop(mid, None)
            if spool_id is None:
                continue  # the status message, a QoS 0 message, or an ack from a session we gave up
            self._spool.ack(spool_id)
            if accepted:
                self._acked += 1
            else:
                self._rejected += 1
                log.warning("MQTT: broker refused message %d (%d refused so far); dropped", spool_id, self._rejected)

    def _begin_session(self, session: int) -> None:
        """A new connection: paho forgot what was in flight, so all of it becomes backlog to re-send."""
        self._session = session
        self._in_flight.clear()
        self._backlog_after = 0
        boundary_session, boundary = self._boundary
        self._backlog_through = boundary if boundary_session == session else self._spool.last_id
        self._backlog_left = self._spool.depth.count > 0
        self._live_after = max(self._live_after, self._backlog_through)
        self._tokens = 0.0
        self._tokens_at = time.monotonic()

    def _send_some(self) -> float:
        """Fill the window; how long to sleep before the next turn (0: go on at once).

        The thread goes on at once only while more may be waiting (the backlog's next share, or live rows
        beyond the room this turn had); otherwise the next put, an ack opening a full window, or the
        backlog's tokens wake it.
        """
        room = self._window() - len(self._in_flight)
        self._waiting_for_room = room <= 0
        if room <= 0:
            # An ack that paho handed over before the flag was set did not wake us: settle it at once.
            return 0.0 if self._acks else _IDLE_WAIT_S
        backlog_sent = 0
        if self._backlog_left:
            budget = min(room, int(self._refill_tokens()))
            if budget > 0:
                rows = self._spool.take(budget, after_id=self._backlog_after, through_id=self._backlog_through)
                self._backlog_left = len(rows) > 0
                backlog_sent = self._send(rows)
                if backlog_sent:
                    self._backlog_after = rows[backlog_sent - 1].id
                self._tokens -= backlog_sent
                if backlog_sent < len(rows):
                    return 0.01  # paho refused one: the connection is going down
        live_room = room - backlog_sent
        rows = self._spool.take(live_room, after_id=self._live_after)
        done = self._send(rows)
        if done:
            self._live_after = rows[done - 1].id
        if done < len(rows):
            return 0.01
        if backlog_sent or (rows and done == live_room):
            return 0.0
        if not self._backlog_left:
            return _IDLE_WAIT_S
        return max(0.001, (1.0 - self._tokens) / self._drain_rate)

    def _send(self, rows: list[SpoolRecord]) -> int:
        for done, row in enumerate(rows):
            allowed = self._connection.qos.allows(row.qos)
            if allowed is None:
                return done  # the broker's QoS 2 support is being checked: a moment
            if not allowed:
                self._hold(row)
                continue
            try:
                mid = self._connection.publish(row.topic, row.payload, qos=row.qos, retain=row.retain)
            except ConfigError as err:  # a row no broker would take: skipping it beats blocking the spool
                log.error("MQTT: dropping spooled message %d: %s", row.id, err)
                self._spool.ack(row.id)
                self._rejected += 1
                continue
            if mid is None:
                return done
            self._in_flight[mid] = row.id
            self._published += 1
        return len(rows)

    def _hold(self, row: SpoolRecord) -> None:
        """Keep a message the broker would only take at a lower QoS: it stays spooled, never downgraded."""
        self._held_qos += 1
        if self._held_said != self._session:
            self._held_said = self._session
            check = self._connection.qos
            log.error(
                "MQTT: broker %s takes at most QoS %s (%s): QoS %d messages stay in the spool, unsent, until a "
                "broker takes them; publish at QoS 1 or use a broker with QoS 2",
                self._connection.broker,
                check.maximum,
                check.source,
                row.qos,
            )

    def _window(self) -> int:
        receive_maximum = self._connection.receive_maximum
        return min(self._max_in_flight, receive_maximum) if receive_maximum else self._max_in_flight

    def _refill_tokens(self) -> float:
        now = time.monotonic()
        burst = max(1.0, self._drain_rate * _BURST_S)
        self._tokens = min(burst, self._tokens + (now - self._tokens_at) * self._drain_rate)
        self._tokens_at = now
        return self._tokens


def _check_topic(topic: str) -> None:
    """Refuse at once what paho would refuse later, so a bad topic never sits in the spool."""
    if not topic or "+" in topic or "#" in topic or len(topic.encode()) > 65535:
        raise ConfigError(f"cannot publish to MQTT topic {topic!r}: empty, too long, or with a wildcard (+ #)")
