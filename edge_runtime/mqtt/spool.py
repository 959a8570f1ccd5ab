"""The durable queue of results the broker has not acknowledged yet: one SQLite table in WAL mode.

paho keeps unacknowledged messages only in memory, so a restart (crash, watchdog, power) would lose
everything an outage had queued. Every QoS >= 1 result is put here first and deleted only when the
broker acknowledged it; on open, whatever is left is replayed.

Writes are batched because SQLite manages tens of thousands of rows per second but only a few thousand
commits: `put` and `ack` append to in-memory batches that one transaction writes every `flush_interval_s`
(50 ms), sooner when a batch reaches `batch_size` rows, and on `flush`, `take` and `close`.

What a kill can cost: the database uses WAL with synchronous=NORMAL, so a process killed with SIGKILL
loses nothing committed; it loses the puts of the unflushed window (at most `flush_interval_s` of results
that were not yet taken for sending; longer while the disk refuses writes, see `last_error`), and acks
of that window are forgotten, so those messages are sent again after the restart (duplicates, never
losses). A power cut can also lose the last commits before
the WAL reached the disk (SQLite's documented trade-off for synchronous=NORMAL).

The spool is bounded by `max_bytes` (topic + payload) and `max_age_s`; beyond either, the oldest rows are
dropped and counted in `dropped_full` and `dropped_age`.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from edge_runtime.errors import ConfigError
from edge_runtime.mqtt.settings import SpoolSettings

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL,
    qos INTEGER NOT NULL,
    retain INTEGER NOT NULL,
    created_at REAL NOT NULL,
    size INTEGER NOT NULL
)
"""
log = logging.getLogger(__name__)
_DELETE_CHUNK = 500  # ids per DELETE ... IN (...); SQLite allows 32766 parameters, this keeps statements small

Row = tuple[int, str, bytes, int, int, float, int]
DropRule = Callable[[float, int], bool]  # (created_at of the next oldest row, bytes freed so far) -> drop it?


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    id: int
    topic: str
    payload: bytes
    qos: int
    retain: bool
    created_at: float  # wall-clock time of `put`


@dataclass(frozen=True, slots=True)
class SpoolDepth:
    count: int  # messages not acknowledged yet (acks still in the batch count until the next flush)
    bytes: int


class Spool:
    """Thread-safe: pipeline threads put, the publisher thread takes and acks."""

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = SpoolSettings().max_bytes,
        max_age_s: float = SpoolSettings().max_age_s,
        batch_size: int = 256,
        flush_interval_s: float = 0.05,
        background_flush: bool = True,
    ) -> None:
        """Without `background_flush` no thread writes the batches: the owner calls `flush` (or `take`
        does); a process that simulates hundreds of boxes cannot afford a thread per spool."""
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.dropped_full = 0
        self.dropped_age = 0
        self.last_error = ""
        self._last_error_logged = -math.inf
        self._lock_fd = _lock_exclusively(self.path)
        try:
            self._db = _open_database(self.path)
            count, size, max_id = self._db.execute("SELECT count(*), total(size), max(id) FROM messages").fetchone()
        except sqlite3.Error as err:
            os.close(self._lock_fd)
            raise ConfigError(f"spool {self.path} cannot be used: {err} (move it away to start empty)") from err
        self._count = int(count)
        self._bytes = int(size)
        self._next_id = int(max_id or 0) + 1
        self._puts: list[Row] = []
        self._acks: list[int] = []
        self._db_lock = threading.Lock()  # held for every statement and for a whole flush
        self._pending_lock = threading.Lock()  # held briefly for the in-memory batches and the counters
        self._closed = False
        self._flush_soon = threading.Event()
        with self._db_lock:
            self._drop_expired()
        self._flusher: threading.Thread | None = None
        if background_flush:
            self._flusher = threading.Thread(target=self._flush_loop, name="mqtt-spool-flush", daemon=True)
            self._flusher.start()

    @classmethod
    def from_settings(cls, settings: SpoolSettings, default_path: Path) -> Spool:
        return cls(settings.path or default_path, max_bytes=settings.max_bytes, max_age_s=settings.max_age_s)

    # -- the queue ---------------------------------------------------------------------------------

    def put(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int:
        """Append a message; returns its id. Ids grow in put order, so id order is age order."""
        size = len(topic.encode()) + len(payload)
        with self._pending_lock:
            if self._closed:
                raise RuntimeError(f"spool {self.path} is closed")
            message_id = self._next_id
            self._next_id += 1
            self._puts.append((message_id, topic, bytes(payload), qos, int(retain), time.time(), size))
            self._count += 1
            self._bytes += size
            full = len(self._puts) >= self.batch_size
        if full:
            self._flush_soon.set()
        return message_id

    def take(
        self,
        limit: int,
        exclude_ids: Collection[int] = (),
        *,
        after_id: int = 0,
        through_id: int | None = None,
    ) -> list[SpoolRecord]:
        """Up to `limit` messages, oldest first, with ids in (after_id, through_id], skipping `exclude_ids`.

        Taking does not remove anything: a message stays until `ack`, so a restart replays it.
        """
        if limit <= 0:
            return []
        upper = through_id if through_id is not None else 2**63 - 1
        excluded = set(exclude_ids)
        with self._db_lock:
            if self._closed:
                return []
            self._flush_batches()
            rows = self._db.execute(
                "SELECT id, topic, payload, qos, retain, created_at FROM messages"
                " WHERE id > ? AND id <= ? ORDER BY id LIMIT ?",
                (after_id, upper, limit + len(excluded)),
            ).fetchall()
        records = [SpoolRecord(r[0], r[1], r[2], r[3], bool(r[4]), r[5]) for r in rows if r[0] not in excluded]
        return records[:limit]

    def ack(self, message_id: int) -> None:
        """The broker has the message: delete it (with the next flush). Unknown or dropped ids are ignored."""
        with self._pending_lock:
            if self._closed:
                return  # forgetting an ack costs a duplicate after restart, never a loss
            self._acks.append(message_id)
            full = len(self._acks) >= self.batch_size
        if full:
            self._flush_soon.set()

    @property
    def depth(self) -> SpoolDepth:
        with self._pending_lock:
            return SpoolDepth(self._count, self._bytes)

    @property
    def last_id(self) -> int:
        """The id of the newest message put so far (0 if none ever was)."""
        with self._pending_lock:
            return self._next_id - 1

    # -- persistence -------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write the batched puts and acks now (one transaction)."""
        with self._db_lock:
            if not self._closed:
                self._flush_batches()

    def close(self) -> None:
        with self._db_lock:
            if self._closed:
                return
            try:
                self._flush_batches()
            except sqlite3.Error as err:
                self._report_write_error(err)
                log.error("MQTT: %d results that could not be written to %s are lost", len(self._puts), self.path)
            with self._pending_lock:
                self._closed = True
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()
        self._flush_soon.set()
        if self._flusher is not None:
            self._flusher.join(timeout=5)
        os.close(self._lock_fd)

    def _flush_loop(self) -> None:
        while True:
            self._flush_soon.wait(self.flush_interval_s)
            self._flush_soon.clear()
            with self._db_lock:
                if self._closed:
                    return
                try:
                    self._flush_batches()
                    self._drop_expired()
                except sqlite3.Error as err:
                    self._report_write_error(err)

    def _report_write_error(self, err: sqlite3.Error) -> None:
        self.last_error = f"cannot write spool {self.path}: {err}"
        now = time.monotonic()
        if now - self._last_error_logged > 10:  # a full disk would otherwise log 20 times a second
            log.error("MQTT: %s; results are kept in memory until it can be written", self.last_error)
            self._last_error_logged = now

    def _flush_batches(self) -> None:
        """Caller holds _db_lock. Inserts, deletes and the size bound in one transaction.

        If SQLite fails (disk full), the batches go back to memory to be written by a later flush.
        """
        with self._pending_lock:
            puts, self._puts = self._puts, []
            acks, self._acks = self._acks, []
        if not puts and not acks:
            return
        try:
            with self._db:
                if puts:
                    self._db.executemany(
                        "INSERT INTO messages (id, topic, payload, qos, retain, created_at, size)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?)",
                        puts,
                    )
                deleted, freed = self._delete_ids(acks)
                excess = self._bytes - freed - self.max_bytes
                dropped, dropped_bytes = (0, 0)
                if excess > 0:
                    dropped, dropped_bytes = self._drop_oldest(lambda _created, freed: freed < excess)
        except sqlite3.Error:
            with self._pending_lock:
                self._puts[:0] = puts
                self._acks[:0] = acks
            raise
        self._account(-deleted - dropped, -freed - dropped_bytes)
        self.dropped_full += dropped
        self.last_error = ""

    def _delete_ids(self, ids: list[int]) -> tuple[int, int]:
        deleted = freed = 0
        for start in range(0, len(ids), _DELETE_CHUNK):
            chunk = ids[start : start + _DELETE_CHUNK]
            marks = ",".join("?" * len(chunk))
            sizes = self._db.execute(f"DELETE FROM messages WHERE id IN ({marks}) RETURNING size", chunk).fetchall()
            deleted += len(sizes)
            freed += sum(s for (s,) in sizes)
        return deleted, freed

    def _drop_expired(self) -> None:
        """Caller holds _db_lock."""
        cutoff = time.time() - self.max_age_s
        oldest = self._db.execute("SELECT created_at FROM messages ORDER BY id LIMIT 1").fetchone()
        if oldest is None or oldest[0] >= cutoff:
            return
        with self._db:
            dropped, dropped_bytes = self._drop_oldest(lambda created, _freed: created < cutoff)
        self._account(-dropped, -dropped_bytes)
        self.dropped_age += dropped

    def _drop_oldest(self, still_dropping: DropRule) -> tuple[int, int]:
        """Delete rows from the oldest while the rule holds: (rows, bytes). Caller holds _db_lock."""
        last_id = dropped = freed = 0
        rows = self._db.execute("SELECT id, created_at, size FROM messages ORDER BY id")
        for message_id, created_at, size in rows:
            if not still_dropping(created_at, freed):
                break
            last_id, dropped, freed = message_id, dropped + 1, freed + size
        rows.close()
        if dropped:
            self._db.execute("DELETE FROM messages WHERE id <= ?", (last_id,))
        return dropped, freed

    def _account(self, count: int, size: int) -> None:
        with self._pending_lock:
            self._count += count
            self._bytes += size

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_database(path: Path) -> sqlite3.Connection:
    # Only this process writes (see _lock_exclusively), so waiting long for a lock would only stall a flush.
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=1.0)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(_SCHEMA)
    db.isolation_level = "DEFERRED"  # `with db:` now opens a transaction and commits or rolls it back
    return db


def _lock_exclusively(path: Path) -> int:
    """Two daemons on one spool would send each other's messages twice and fight over acks."""
    lock_path = path.with_name(path.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as err:
        raise ConfigError(f"spool {path}: cannot create {lock_path}: {err.strerror}") from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        raise ConfigError(f"spool {path} is in use by another process (lock {lock_path})") from err
    return fd
