"""The watchdog pings systemd only while every pipeline advances or waits on a handled outage.

Pings go through a real SystemdNotifier to a real datagram socket. Most tests drive `check()` with a
clock they set, so that minutes of pipeline life take no time; one runs the ping thread on the real clock.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from notify_socket import NotifySocket

from edge_runtime.service import ProgressWatchdog, SystemdNotifier


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def pings(socket: NotifySocket) -> int:
    return socket.drain().count("WATCHDOG=1")


def statuses(socket: NotifySocket) -> list[str]:
    return [m.removeprefix("STATUS=") for m in socket.drain() if m.startswith("STATUS=")]


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_watchdog(socket: NotifySocket, clock: Clock, *names: str, stall_after: float = 30.0) -> ProgressWatchdog:
    return ProgressWatchdog(SystemdNotifier(socket.environ), 30.0, names, stall_after=stall_after, clock=clock)


def test_pings_while_every_pipeline_beats(notify_socket: NotifySocket, clock: Clock) -> None:
    watchdog = make_watchdog(notify_socket, clock, "front-door", "vibration")
    for _ in range(10):
        clock.advance(15)
        watchdog.beat("front-door")
        watchdog.beat("vibration")
        assert watchdog.check()
        assert pings(notify_socket) == 1
    assert [p.beats for p in watchdog.health()] == [10, 10]


def test_one_stalled_pipeline_stops_the_pings(
    notify_socket: NotifySocket, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    watchdog = make_watchdog(notify_socket, clock, "front-door", "vibration")
    clock.advance(20)
    watchdog.beat("front-door")
    watchdog.beat("vibration")
    assert watchdog.check()
    for _ in range(2):  # vibration's thread hangs; front-door keeps going
        clock.advance(15)
        watchdog.beat("front-door")
        assert watchdog.check()  # vibration silent for 15 s, then 30 s: within its window
    assert pings(notify_socket) == 3
    with caplog.at_level(logging.ERROR, logger="edge_runtime.service.watchdog"):
        clock.advance(15)
        watchdog.beat("front-door")
        assert not watchdog.check()
        assert not watchdog.check()
    assert pings(notify_socket) == 0
    [stalled] = [p for p in watchdog.health() if p.state == "stalled"]
    assert stalled.name == "vibration" and stalled.silent_s == pytest.approx(45.0)
    assert len(caplog.records) == 1 and "pipeline vibration stalled" in caplog.records[0].getMessage()


def test_a_camera_in_an_outage_that_is_being_reconnected_keeps_the_pings(
    notify_socket: NotifySocket, clock: Clock
) -> None:
    watchdog = make_watchdog(notify_socket, clock, "front-door", "vibration")
    for _ in range(20):  # five minutes of outage, the pipeline reporting each failed read
        clock.advance(15)
        watchdog.waiting("front-door", "camera reconnecting: connection refused")
        watchdog.beat("vibration")
        assert watchdog.check()
        assert pings(notify_socket) == 1
    camera = watchdog.health()[0]
    assert camera.state == "waiting" and camera.reason == "camera reconnecting: connection refused"
    assert camera.beats == 0


def test_a_wait_that_is_no_longer_reported_is_a_stall(notify_socket: NotifySocket, clock: Clock) -> None:
    watchdog = make_watchdog(notify_socket, clock, "front-door")
    watchdog.waiting("front-door", "camera reconnecting")
    clock.advance(29)
    assert watchdog.check()
    clock.advance(2)  # the reconnect loop itself hung
    assert not watchdog.check()
    assert watchdog.health()[0].state == "stalled" and watchdog.health()[0].reason == "camera reconnecting"


def test_an_announced_long_wait_is_not_a_stall_until_it_overruns(notify_socket: NotifySocket, clock: Clock) -> None:
    watchdog = make_watchdog(notify_socket, clock, "front-door")
    watchdog.waiting("front-door", "compiling the model for GPU", up_to=300)
    clock.advance(299)
    assert watchdog.check()
    clock.advance(2)
    assert not watchdog.check()


def test_pings_resume_when_a_stalled_pipeline_beats_again(
    notify_socket: NotifySocket, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    watchdog = make_watchdog(notify_socket, clock, "front-door")
    clock.advance(31)
    assert not watchdog.check()
    with caplog.at_level(logging.WARNING, logger="edge_runtime.service.watchdog"):
        watchdog.beat("front-door")
        assert watchdog.check()
    assert "alive again" in caplog.text
    assert pings(notify_socket) == 1


def test_unregistering_a_finished_pipeline_lifts_its_stall(notify_socket: NotifySocket, clock: Clock) -> None:
    watchdog = make_watchdog(notify_socket, clock, "replay", "front-door")
    clock.advance(31)
    watchdog.beat("front-door")
    assert not watchdog.check()
    watchdog.unregister("replay")
    assert watchdog.check()
    assert [p.name for p in watchdog.health()] == ["front-door"]


def test_each_pipeline_can_have_its_own_stall_window(notify_socket: NotifySocket, clock: Clock) -> None:
    watchdog = make_watchdog(notify_socket, clock, "front-door")
    watchdog.register("hourly-meter", stall_after=4000)
    clock.advance(60)
    watchdog.beat("front-door")
    assert watchdog.check()
    assert {p.name: p.state for p in watchdog.health()} == {"front-door": "advancing", "hourly-meter": "advancing"}


def test_reports_for_unknown_pipelines_are_ignored(notify_socket: NotifySocket, clock: Clock) -> None:
    watchdog = make_watchdog(notify_socket, clock, "front-door")
    watchdog.beat("removed-by-reload")
    watchdog.waiting("removed-by-reload", "gone")
    assert [p.name for p in watchdog.health()] == ["front-door"]


def test_status_is_sent_when_it_changes_only(notify_socket: NotifySocket, clock: Clock) -> None:
    watchdog = make_watchdog(notify_socket, clock, "front-door", "vibration")
    watchdog.check()
    watchdog.check()
    watchdog.waiting("front-door", "camera reconnecting")
    watchdog.check()
    assert statuses(notify_socket) == [
        "front-door: advancing; vibration: advancing",
        "front-door: waiting (camera reconnecting); vibration: advancing",
    ]


def test_invalid_windows_are_refused(notify_socket: NotifySocket) -> None:
    notifier = SystemdNotifier(notify_socket.environ)
    with pytest.raises(ValueError, match="interval"):
        ProgressWatchdog(notifier, -1.0)
    with pytest.raises(ValueError, match="front-door"):
        ProgressWatchdog(notifier, 30.0).register("front-door", stall_after=-5)


def test_no_watchdog_configured_means_no_thread(notify_socket: NotifySocket) -> None:
    watchdog = ProgressWatchdog(SystemdNotifier(notify_socket.environ), None, ["front-door"])
    assert watchdog.interval is None and watchdog.stall_after == 30.0
    assert not watchdog.start()
    watchdog.stop()


def test_interval_comes_from_the_environment_systemd_sets(notify_socket: NotifySocket) -> None:
    environ = {**notify_socket.environ, "WATCHDOG_USEC": "8000000"}
    watchdog = ProgressWatchdog(SystemdNotifier(environ))
    assert watchdog.interval == 8.0 and watchdog.stall_after == 8.0


def test_ping_thread_pings_at_half_the_interval_and_stops_on_a_stall(notify_socket: NotifySocket) -> None:
    watchdog = ProgressWatchdog(SystemdNotifier(notify_socket.environ), 0.2, ["camera"], stall_after=0.3)
    beating = threading.Event()
    beating.set()
    finished = threading.Event()

    def pipeline() -> None:
        while not finished.is_set():
            if beating.is_set():
                watchdog.beat("camera")
            time.sleep(0.02)

    thread = threading.Thread(target=pipeline)
    thread.start()
    try:
        with watchdog:
            time.sleep(0.6)
            assert pings(notify_socket) >= 3  # about 6 at one per 0.1 s
            beating.clear()  # the pipeline hangs
            time.sleep(0.3 + 0.1 + 0.2)  # stall window, one ping period, slack
            notify_socket.drain()
            time.sleep(0.5)
            assert pings(notify_socket) == 0
            beating.set()
            time.sleep(0.4)
            assert pings(notify_socket) >= 1
    finally:
        finished.set()
        thread.join()
    stopped_at = pings(notify_socket)
    time.sleep(0.25)
    assert pings(notify_socket) == 0, f"pings after stop (had {stopped_at} queued)"
