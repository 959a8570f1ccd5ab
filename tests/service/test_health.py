"""The health report: the watchdog's view of the pipelines and of delivery, written by the daemon and judged by
`edge-runtime health`.

Most tests drive a real watchdog and reporter with a clock they set. The last one runs the daemon against a
real broker and makes things stall for real: the broker process stopped with SIGSTOP (connected, but acknowledging
nothing), then the daemon itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from broker import Mosquitto
from daemon_process import REPO, DaemonProcess, face_pipeline
from notify_socket import NotifySocket
from waiting import wait_for

from edge_runtime.mqtt.publisher import PublisherStats
from edge_runtime.service import ProgressWatchdog, SystemdNotifier
from edge_runtime.service.health import (
    DELIVERY,
    HEALTH_FILE,
    WRITE_EVERY_S,
    DeliveryProgress,
    HealthReporter,
    boot_id,
    judge_report,
)

IDLE = PublisherStats(
    spooled=0, published=0, acked=0, rejected=0, in_flight=0, spool_messages=0, spool_bytes=0, dropped_full=0,
    dropped_age=0, dropped_qos0=0, reconnects=0, connected=True, broker="127.0.0.1:1883", broker_moves=0, held_qos=0,
)  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Publisher:
    """What the broker side looks like to the reporter: its counters, changed by the test."""

    def __init__(self) -> None:
        self.current = IDLE

    def stats(self) -> PublisherStats:
        return self.current


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def watchdog(notify_socket: NotifySocket, clock: Clock) -> ProgressWatchdog:
    return ProgressWatchdog(SystemdNotifier(notify_socket.environ), 30.0, ["front-door"], stall_after=30.0, clock=clock)


def delivery_state(watchdog: ProgressWatchdog) -> tuple[str, str]:
    [part] = [p for p in watchdog.health() if p.name == DELIVERY]
    return part.state, part.reason


def test_delivery_advances_while_the_spool_drains_and_stalls_when_a_connected_broker_acknowledges_nothing(
    watchdog: ProgressWatchdog, clock: Clock
) -> None:
    publisher = Publisher()
    delivery = DeliveryProgress(watchdog, publisher.stats)
    watchdog.register(DELIVERY)
    for acked in range(1, 40):  # a backlog draining: acknowledgements keep coming
        publisher.current = replace(IDLE, acked=acked, spool_messages=500 - acked, in_flight=10)
        clock.advance(1)
        delivery.observe()
        watchdog.beat("front-door")
    assert delivery_state(watchdog) == ("advancing", "")
    for _ in range(31):  # the broker keeps the connection but stops answering
        clock.advance(1)
        delivery.observe()
        watchdog.beat("front-door")
    assert delivery_state(watchdog)[0] == "stalled"
    assert not watchdog.check()  # systemd's watchdog and the health check agree
    publisher.current = replace(publisher.current, acked=publisher.current.acked + 1)
    delivery.observe()
    assert delivery_state(watchdog) == ("advancing", "")


def test_delivery_waits_alive_while_the_broker_is_down_and_results_go_to_the_spool(
    watchdog: ProgressWatchdog, clock: Clock
) -> None:
    publisher = Publisher()
    delivery = DeliveryProgress(watchdog, publisher.stats)
    watchdog.register(DELIVERY)
    for spooled in range(1, 300):  # five minutes of outage
        publisher.current = replace(IDLE, connected=False, spooled=spooled, spool_messages=spooled)
        clock.advance(1)
        delivery.observe()
        watchdog.beat("front-door")
    assert delivery_state(watchdog) == ("waiting", "broker 127.0.0.1:1883 unreachable, 299 spooled")
    assert watchdog.check()


def test_messages_the_broker_refuses_count_as_answered_since_they_leave_the_spool(
    watchdog: ProgressWatchdog, clock: Clock
) -> None:
    publisher = Publisher()
    delivery = DeliveryProgress(watchdog, publisher.stats)
    watchdog.register(DELIVERY)
    for refused in range(1, 40):  # an MQTT 5 broker refusing every message of a backlog (an ACL, a quota)
        publisher.current = replace(IDLE, rejected=refused, spool_messages=500 - refused, in_flight=10)
        clock.advance(1)
        delivery.observe()
    assert delivery_state(watchdog) == ("advancing", "")


def test_an_empty_spool_is_delivery_advancing_however_long_nothing_is_published(
    watchdog: ProgressWatchdog, clock: Clock
) -> None:
    delivery = DeliveryProgress(watchdog, Publisher().stats)
    watchdog.register(DELIVERY)
    for _ in range(100):
        clock.advance(1)
        delivery.observe()
    assert delivery_state(watchdog) == ("advancing", "")


def test_the_report_is_healthy_while_everything_advances_and_names_what_stalled(
    watchdog: ProgressWatchdog, clock: Clock, tmp_path: Path
) -> None:
    path = tmp_path / HEALTH_FILE
    reporter = HealthReporter(watchdog, Publisher().stats, path, clock=clock)
    watchdog.register(DELIVERY)
    watchdog.beat("front-door")
    reporter.step()
    verdict = judge_report(path, clock)
    assert verdict.healthy and verdict.summary == "healthy: front-door advancing; mqtt delivery advancing"
    clock.advance(31)  # front-door's feed thread hangs; delivery is still observed
    reporter.step()
    verdict = judge_report(path, clock)
    assert not verdict.healthy
    assert verdict.summary == "stalled: front-door silent for 31 s after 1 results"
    watchdog.beat("front-door")
    reporter.step()  # written at once: the verdict changed
    assert judge_report(path, clock).healthy


def test_a_report_nobody_rewrites_goes_stale_after_the_stall_window(
    watchdog: ProgressWatchdog, clock: Clock, tmp_path: Path
) -> None:
    path = tmp_path / HEALTH_FILE
    HealthReporter(watchdog, Publisher().stats, path, clock=clock).step()
    clock.advance(30 + WRITE_EVERY_S - 0.5)
    assert judge_report(path, clock).healthy
    clock.advance(1.5)  # the daemon froze: nothing rewrites the file
    verdict = judge_report(path, clock)
    assert not verdict.healthy and verdict.summary == "the daemon has not reported for 36 s: it is hung or gone"


def test_a_new_daemon_removes_the_report_a_killed_one_left_and_a_stopped_one_leaves_none(
    watchdog: ProgressWatchdog, clock: Clock, tmp_path: Path
) -> None:
    path = tmp_path / HEALTH_FILE
    HealthReporter(watchdog, Publisher().stats, path, clock=clock).step()
    assert path.exists()
    reporter = HealthReporter(watchdog, Publisher().stats, path, clock=clock)
    assert not path.exists()
    reporter.start()
    assert wait_for(path.exists, timeout=5)
    reporter.stop()
    assert not path.exists()
    assert judge_report(path, clock).summary == f"no daemon is running with its state in {tmp_path} (no health.json)"


def _report(**fields: object) -> dict[str, object]:
    part = {"name": "faces", "state": "advancing", "beats": 3, "silent_s": 0.1, "reason": ""}
    return {"written_at": 1000.0, "boot_id": boot_id(), "stale_after_s": 35.0, "parts": [part], **fields}


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\xff\xfe not text",
        b"[" * 100_000 + b"]" * 100_000,  # nesting deep enough to exhaust the parser's recursion
        b'{"parts": []}',
        json.dumps(_report(written_at="1000")).encode(),
        json.dumps(_report(written_at=True)).encode(),
        json.dumps(_report(parts=[{"name": "faces", "state": "fine"}])).encode(),
        json.dumps(_report(parts="faces")).encode(),
        json.dumps(_report(stale_after_s=1e400)).encode(),  # infinity: never stale
        b'{"written_at": NaN, "boot_id": "", "stale_after_s": 35, "parts": []}',  # NaN: every comparison false
        b" " * (2 << 20),
    ],
)
def test_a_malformed_report_is_unhealthy_with_a_line_not_a_traceback(
    content: bytes, clock: Clock, tmp_path: Path
) -> None:
    path = tmp_path / HEALTH_FILE
    path.write_bytes(content)
    verdict = judge_report(path, clock)
    assert not verdict.healthy and verdict.summary == f"{path} is not a health report"


def test_a_report_from_an_earlier_boot_is_not_fresh(clock: Clock, tmp_path: Path) -> None:
    path = tmp_path / HEALTH_FILE
    path.write_text(json.dumps(_report(boot_id="another-boot")))
    assert "earlier boot" in judge_report(path, clock).summary
    path.write_text(json.dumps(_report()))
    assert judge_report(path, clock).healthy


def health(state_dir: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "edge_runtime", "health", "--state-dir", str(state_dir)]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=30)


def test_the_health_command_fails_while_the_broker_hangs_or_the_daemon_is_frozen_and_recovers_after(
    mosquitto: Mosquitto,
    tmp_path: Path,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    state = tmp_path / "state"
    source = {"type": "file", "path": str(clip(20)), "loop": True, "realtime": True}
    config = write_config(mosquitto, [face_pipeline(clip(20), source=source)])
    # a stall window of 2 s instead of the default 30, set as systemd sets the watchdog's
    daemon = run_daemon(config, env={"WATCHDOG_USEC": "2000000"})
    assert wait_for(lambda: health(state).returncode == 0, timeout=90, interval=0.5), daemon.log
    assert health(state).stdout == "healthy: faces advancing; mqtt delivery advancing\n"

    assert mosquitto._process is not None
    broker_pid = mosquitto._process.pid
    os.kill(broker_pid, signal.SIGSTOP)  # the connection stays up; nothing is acknowledged any more
    try:
        assert wait_for(lambda: health(state).returncode == 1, timeout=20, interval=0.5), daemon.log
        unhealthy = health(state)
        assert unhealthy.stderr.startswith("stalled: mqtt delivery silent for"), unhealthy.stderr
        assert "faces" not in unhealthy.stderr  # the pipeline goes on, into the spool
    finally:
        os.kill(broker_pid, signal.SIGCONT)
    assert wait_for(lambda: health(state).returncode == 0, timeout=20, interval=0.5), daemon.log

    os.kill(daemon.process.pid, signal.SIGSTOP)  # every thread of the daemon frozen
    try:
        assert wait_for(lambda: health(state).returncode == 1, timeout=20, interval=0.5)
        assert "has not reported for" in health(state).stderr
    finally:
        os.kill(daemon.process.pid, signal.SIGCONT)
    assert wait_for(lambda: health(state).returncode == 0, timeout=20, interval=0.5), daemon.log

    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.log
    stopped = health(state)
    assert (
        stopped.returncode == 1
        and stopped.stderr == f"no daemon is running with its state in {state} (no health.json)\n"
    )
