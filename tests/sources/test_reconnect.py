"""Outage bookkeeping and password masking."""

from __future__ import annotations

import logging

import pytest

from edge_runtime.sources.base import SourceStats
from edge_runtime.sources.reconnect import ConnectionMonitor, mask_url


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
