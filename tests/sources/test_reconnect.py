"""Outage bookkeeping and password masking."""

from __future__ import annotations

import logging
import re
import time

import pytest

from edge_runtime.sources.base import SourceStats
from edge_runtime.sources.reconnect import ConnectionMonitor, mask_url, spoken_duration


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
        "source door (rtsp://a:***@cam/1): refused 0",
        "source door (rtsp://a:***@cam/1): gone again",
    ]
    assert sum("reconnected after" in r.getMessage() for r in caplog.records) == 2


def test_a_first_connection_that_fails_is_an_outage() -> None:
    stats = SourceStats()
    monitor = ConnectionMonitor(stats, "door", "/dev/video0")
    monitor.lost("cannot open")
    monitor.connected()
    assert (stats.outages, stats.reconnects) == (1, 1)


def test_a_long_outage_is_said_again_at_growing_intervals_with_the_next_try(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="edge_runtime.sources")
    stats = SourceStats()
    monitor = ConnectionMonitor(stats, "door", "rtsp://cam/1")
    monitor.REMINDER_FIRST_S, monitor.REMINDER_MAX_S = 0.2, 0.4
    started = time.monotonic()
    while time.monotonic() - started < 1.5:
        monitor.lost("refused", retry_in_s=4.0)
        time.sleep(0.01)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings[0] == "source door (rtsp://cam/1): refused; next try in 4.0 s"
    reminders = warnings[1:]
    # after 0.2 s, 0.6 s (gap doubled to 0.4), then every 0.4 s: 1.0 s, 1.4 s
    assert 3 <= len(reminders) <= 4, warnings
    assert all(
        re.fullmatch(
            r"source door \(rtsp://cam/1\): still unavailable after \d\.\d s: refused; "
            r"next try in 4\.0 s",
            line,
        )
        for line in reminders
    ), reminders
    outage = monitor.outage()
    assert outage is not None and re.fullmatch(r"unavailable for 1\.\d s \(refused\); next try in \d\.\d s", outage)
    monitor.connected()
    assert monitor.outage() is None


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0.25, "0.2 s"), (9.96, "10.0 s"), (42.4, "42 s"), (252, "4 min 12 s"), (11_100, "3 h 5 min")],
)
def test_durations_are_spoken(seconds: float, said: str) -> None:
    assert spoken_duration(seconds) == said
