"""sd_notify messages arrive on a real datagram socket exactly as systemd would read them."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
from notify_socket import NotifySocket

from edge_runtime.service import SystemdNotifier, watchdog_interval


def test_messages_reach_a_filesystem_socket(notify_socket: NotifySocket) -> None:
    notifier = SystemdNotifier(notify_socket.environ)
    assert notifier.enabled
    assert notifier.ready()
    assert notify_socket.receive() == "READY=1"
    assert notifier.status("2 pipelines running")
    assert notify_socket.receive() == "STATUS=2 pipelines running"
    assert notifier.watchdog()
    assert notify_socket.receive() == "WATCHDOG=1"
    assert notifier.stopping()
    assert notify_socket.receive() == "STOPPING=1"


def test_messages_reach_an_abstract_socket(abstract_notify_socket: NotifySocket) -> None:
    notifier = SystemdNotifier(abstract_notify_socket.environ)
    assert notifier.ready("models loaded")
    assert abstract_notify_socket.receive() == "READY=1\nSTATUS=models loaded"
    assert notifier.watchdog()
    assert abstract_notify_socket.receive() == "WATCHDOG=1"


def test_reads_notify_socket_from_the_process_environment(
    notify_socket: NotifySocket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket.address)
    assert SystemdNotifier().stopping()
    assert notify_socket.receive() == "STOPPING=1"


def test_reloading_carries_the_monotonic_clock(notify_socket: NotifySocket) -> None:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert SystemdNotifier(notify_socket.environ).reloading()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    reloading, monotonic = notify_socket.receive().split("\n")
    assert reloading == "RELOADING=1"
    key, value = monotonic.split("=")
    assert key == "MONOTONIC_USEC" and before <= int(value) <= after


def test_extend_timeout_is_in_microseconds(notify_socket: NotifySocket) -> None:
    assert SystemdNotifier(notify_socket.environ).extend_timeout(90)
    assert notify_socket.receive() == "EXTEND_TIMEOUT_USEC=90000000"


def test_a_newline_in_a_status_cannot_inject_an_assignment(notify_socket: NotifySocket) -> None:
    assert SystemdNotifier(notify_socket.environ).status("camera lost\nREADY=1")
    assert notify_socket.receive() == "STATUS=camera lost READY=1"


def test_without_notify_socket_every_call_is_a_no_op() -> None:
    notifier = SystemdNotifier({})
    assert not notifier.enabled
    calls = [notifier.ready, notifier.stopping, notifier.reloading, notifier.watchdog, lambda: notifier.status("x")]
    assert [call() for call in calls] == [False] * len(calls)


def test_an_address_that_is_not_a_unix_socket_disables_notifications() -> None:
    notifier = SystemdNotifier({"NOTIFY_SOCKET": "vsock:2:1234"})
    assert not notifier.enabled
    assert not notifier.ready()


def test_a_failing_send_returns_false_and_logs_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    notifier = SystemdNotifier({"NOTIFY_SOCKET": str(tmp_path / "gone")})
    with caplog.at_level(logging.DEBUG, logger="edge_runtime.service.notify"):
        results = [notifier.watchdog() for _ in range(3)]
    assert results == [False, False, False]
    failures = [r for r in caplog.records if "sd_notify" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno == logging.DEBUG


def test_a_service_manager_that_does_not_read_never_blocks_the_sender(notify_socket: NotifySocket) -> None:
    notifier = SystemdNotifier(notify_socket.environ)
    started = time.monotonic()
    results = [notifier.watchdog() for _ in range(2000)]  # far beyond a datagram socket's queue
    assert time.monotonic() - started < 5
    assert results[0] and not results[-1]
    assert notify_socket.drain().count("WATCHDOG=1") == results.count(True)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 30.0),
        ({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": str(os.getpid())}, 0.5),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid() + 1)}, None),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "not-a-pid"}, None),
        ({"WATCHDOG_USEC": "thirty"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "-5"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval(environ: dict[str, str], expected: float | None) -> None:
    assert watchdog_interval(environ) == expected


def test_watchdog_interval_of_a_child_that_inherited_the_environment() -> None:
    environ = {"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4242"}
    assert watchdog_interval(environ, pid=4242) == 30.0
    assert watchdog_interval(environ, pid=4243) is None


def test_notifier_reports_the_interval_of_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "20000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    assert SystemdNotifier().watchdog_interval() == 20.0
    assert SystemdNotifier({}).watchdog_interval() is None
