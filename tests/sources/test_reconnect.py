"""Backoff timing, outage bookkeeping and password masking."""

from __future__ import annotations

import logging
import random

import pytest

from edge_runtime.sources.base import SourceStats
from edge_runtime.sources.configs import Reconnect
from edge_runtime.sources.reconnect import Backoff, ConnectionMonitor, mask_url


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("rtsp://admin:hunter2@10.0.0.5:554/stream1", "rtsp://admin:***@10.0.0.5:554/stream1"),
        ("rtsp://admin@10.0.0.5/stream1", "rtsp://admin@10.0.0.5/stream1"),
        ("rtsp://10.0.0.5/stream1", "rtsp://10.0.0.5/stream1"),
        ("http://cam/video.cgi?user=admin&password=hunter2", "http://cam/video.cgi?user=admin&password=***"),
        ("http://u:p%40ss@cam/x?token=abc", "http://u:***@cam/x?token=***"),
    ],
)
def test_mask_url_hides_passwords(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_backoff_doubles_up_to_the_maximum_with_bounded_jitter() -> None:
    backoff = Backoff(Reconnect(initial_s=1.0, max_s=8.0, jitter=0.2), random.Random(7))
    delays = [backoff.next_delay() for _ in range(7)]
    for delay, base in zip(delays, [1, 2, 4, 8, 8, 8, 8], strict=True):
        assert 0.8 * base <= delay <= 1.2 * base
    assert len(set(delays)) == len(delays), "jitter should spread the delays"
    backoff.reset()
    assert 0.8 <= backoff.next_delay() <= 1.2


def test_backoff_without_jitter_is_exact() -> None:
    backoff = Backoff(Reconnect(initial_s=0.5, max_s=3.0, jitter=0.0))
    assert [backoff.next_delay() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_monitor_counts_each_outage_once_and_logs_it_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="edge_runtime.sources")
    stats = SourceStats()
    monitor = ConnectionMonitor(stats, "door", "rtsp://a:b@cam/1")
    monitor.connected()
    assert (stats.connected, stats.outages, stats.reconnects) == (True, 0, 0)
    for attempt in range(3):
        monitor.lost(f"refused {attempt}")
    assert (stats.connected, stats.outages, stats.last_error) == (False, 1, "refused 2")
    monitor.connected()
    monitor.lost("gone again")
    monitor.connected()
    assert (stats.outages, stats.reconnects, stats.connected) == (2, 2, True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "source door (rtsp://a:***@cam/1): refused 0; reconnecting with backoff",
        "source door (rtsp://a:***@cam/1): gone again; reconnecting with backoff",
    ]
    assert sum("reconnected after" in r.getMessage() for r in caplog.records) == 2


def test_a_first_connection_that_fails_is_an_outage() -> None:
    stats = SourceStats()
    monitor = ConnectionMonitor(stats, "door", "/dev/video0")
    monitor.lost("cannot open")
    monitor.connected()
    assert (stats.outages, stats.reconnects) == (1, 1)
