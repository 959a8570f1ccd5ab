from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.errors import ConfigError
from edge_runtime.mqtt.settings import SpoolSettings
from edge_runtime.mqtt.spool import Spool


def ids(spool: Spool, limit: int = 10_000, **kwargs: object) -> list[int]:
    return [record.id for record in spool.take(limit, **kwargs)]


def test_take_is_oldest_first_and_ack_removes(tmp_path: Path) -> None:
    with Spool(tmp_path / "spool.sqlite") as spool:
        put = [spool.put(f"edge/box/{i}", b"x" * i, qos=1 + i % 2, retain=i == 3) for i in range(5)]
        assert put == sorted(put)
        records = spool.take(3)
        assert [r.id for r in records] == put[:3]
        assert [(r.topic, r.payload, r.qos) for r in records] == [
            (f"edge/box/{i}", b"x" * i, 1 + i % 2) for i in range(3)
        ]
        assert spool.take(10, exclude_ids={put[0], put[2]}) == [
            r for r in spool.take(10) if r.id not in {put[0], put[2]}
        ]
        assert ids(spool, after_id=put[1], through_id=put[3]) == put[2:4]
        assert [r.retain for r in spool.take(10)] == [False, False, False, True, False]
        spool.ack(put[1])
        spool.ack(put[3])
        spool.ack(12345)  # unknown: ignored
        spool.flush()
        assert ids(spool) == [put[0], put[2], put[4]]
        depth = spool.depth
        assert depth.count == 3
        assert depth.bytes == sum(len(f"edge/box/{i}") + i for i in (0, 2, 4))


def test_everything_not_acked_is_replayed_after_reopen(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    with Spool(path) as spool:
        put = [spool.put("edge/box/results", b"%d" % i) for i in range(1000)]
        for message_id in put[:400]:
            spool.ack(message_id)
    with Spool(path) as spool:
        assert ids(spool) == put[400:]
        assert spool.depth.count == 600
        assert spool.last_id == put[-1]
        assert spool.put("edge/box/results", b"new") > put[-1]


def test_batched_writes_reach_disk_within_the_flush_interval(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    with Spool(path, flush_interval_s=0.05) as spool:
        spool.put("edge/box/results", b"one")
        assert _rows_on_disk(path) == 0  # still in the batch
        time.sleep(0.3)
        assert _rows_on_disk(path) == 1
        for i in range(300):  # more than a batch: written without waiting for the timer
            spool.put("edge/box/results", b"%d" % i)
        deadline = time.monotonic() + 2
        while _rows_on_disk(path) < 257 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert _rows_on_disk(path) >= 257


def _rows_on_disk(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM messages").fetchone()[0])


def test_full_spool_drops_the_oldest_and_counts_them(tmp_path: Path) -> None:
    topic = "edge/box/results"
    size = len(topic) + 100
    with Spool(tmp_path / "spool.sqlite", max_bytes=10 * size) as spool:
        put = [spool.put(topic, bytes([i]) * 100) for i in range(25)]
        spool.flush()
        assert ids(spool) == put[-10:]
        assert spool.dropped_full == 15
        assert spool.depth.count == 10
        assert spool.depth.bytes == 10 * size
        assert [r.payload[0] for r in spool.take(10)] == list(range(15, 25))


def test_messages_older_than_max_age_are_dropped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    with Spool(path, max_age_s=0.3, flush_interval_s=0.02) as spool:
        old = [spool.put("edge/box/results", b"old") for _ in range(5)]
        time.sleep(0.2)
        fresh = [spool.put("edge/box/results", b"fresh") for _ in range(3)]
        spool.flush()
        assert ids(spool) == old + fresh
        _wait_for(lambda: spool.dropped_age == 5, 2.0)
        assert ids(spool) == fresh
        assert spool.depth.count == 3
    time.sleep(0.4)  # expired while no process had the spool open: dropped on open
    with Spool(path, max_age_s=0.3) as spool:
        assert spool.dropped_age == 3
        assert ids(spool) == []


def test_threads_put_while_another_takes_and_acks(tmp_path: Path) -> None:
    with Spool(tmp_path / "spool.sqlite") as spool:
        producers = [threading.Thread(target=_put_many, args=(spool, t, 2000)) for t in range(4)]
        for thread in producers:
            thread.start()
        seen: list[bytes] = []
        after = 0
        while any(t.is_alive() for t in producers) or spool.depth.count:
            records = spool.take(100, after_id=after)
            for record in records:
                seen.append(record.payload)
                spool.ack(record.id)
            if records:
                after = records[-1].id
            spool.flush()
        assert sorted(seen) == sorted(b"%d-%d" % (t, i) for t in range(4) for i in range(2000))
        for t in range(4):  # each producer's messages keep their order
            mine = [p for p in seen if p.startswith(b"%d-" % t)]
            assert mine == [b"%d-%d" % (t, i) for i in range(2000)]


def _put_many(spool: Spool, thread: int, count: int) -> None:
    for i in range(count):
        spool.put("edge/box/results", b"%d-%d" % (thread, i))


def test_a_killed_process_loses_nothing_it_had_flushed(tmp_path: Path, spawn: Callable[..., Any]) -> None:
    path = tmp_path / "spool.sqlite"
    child = spawn("spool", str(path))
    child.wait_line(lambda line: line.startswith("durable ") and int(line.split()[1]) >= 2000)
    child.kill()
    durable = child.read_durable()
    with Spool(path) as spool:
        payloads = [int(r.payload) for r in spool.take(1_000_000)]
    assert payloads[: durable + 1] == list(range(durable + 1))
    assert payloads == list(range(len(payloads)))  # no gaps, no duplicates, beyond the durable ones either


def test_second_process_on_the_same_spool_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    with Spool(path), pytest.raises(ConfigError, match="in use by another process"):
        Spool(path)
    Spool(path).close()  # released on close


def test_a_file_that_is_not_a_spool_is_reported_by_name(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ConfigError, match=str(path)):
        Spool(path)


def test_from_settings_uses_the_default_path_and_limits(tmp_path: Path) -> None:
    settings = SpoolSettings(max_bytes=1234, max_age_s=56)
    with Spool.from_settings(settings, tmp_path / "state" / "spool.sqlite") as spool:
        assert spool.path == tmp_path / "state" / "spool.sqlite"
        assert (spool.max_bytes, spool.max_age_s) == (1234, 56)
    assert (tmp_path / "state" / "spool.sqlite").is_file()


def _wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_a_failed_write_keeps_the_batch_and_writes_it_later(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    with Spool(path, flush_interval_s=0.02) as spool:
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")  # another writer holds the database: our commits fail
        put = [spool.put("edge/box/results", b"%d" % i) for i in range(10)]
        _wait_for(lambda: "locked" in spool.last_error, 5.0)
        blocker.execute("COMMIT")
        blocker.close()
        _wait_for(lambda: _rows_on_disk(path) == 10, 5.0)
        assert ids(spool) == put
        assert spool.last_error == ""
