"""The sd_notify protocol spoken directly, so the daemon needs neither libsystemd nor a binding to it.

systemd passes the address of its notification socket in $NOTIFY_SOCKET: a filesystem path, or an
abstract socket written with a leading '@'. Each message is one datagram of newline-separated
KEY=VALUE assignments. Outside systemd (a terminal, a container, the tests) the variable is unset and
every call is a no-op returning False, so callers never need to know how they were started.

A failed send must never take the daemon down or stall it: the socket may have gone away, or the service
manager may be too busy to read (a datagram socket's queue is short, a blocking send would wait for it).
Sends do not block; failures are logged once, at debug level, and reported through the return value.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

log = logging.getLogger(__name__)


def watchdog_interval(environ: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """The WatchdogSec= of this service in seconds, or None when no watchdog is watching this process.

    Follows sd_watchdog_enabled(3): $WATCHDOG_PID, when set, names the process the watchdog is meant for,
    so a child that inherited the environment does not think it is being watched.
    """
    env = os.environ if environ is None else environ
    raw_usec = env.get("WATCHDOG_USEC")
    if not raw_usec:
        return None
    try:
        usec = int(raw_usec)
    except ValueError:
        log.debug("ignoring WATCHDOG_USEC=%r: not an integer", raw_usec)
        return None
    if usec <= 0:
        return None
    raw_pid = env.get("WATCHDOG_PID")
    if raw_pid:
        try:
            watched = int(raw_pid)
        except ValueError:
            log.debug("ignoring the watchdog: WATCHDOG_PID=%r is not a process id", raw_pid)
            return None
        if watched != (os.getpid() if pid is None else pid):
            return None
    return usec / 1_000_000


def _socket_address(raw: str) -> str | None:
    """The address to send to: abstract sockets ('@name') start with a NUL byte on the wire."""
    if raw.startswith("@"):
        return "\0" + raw[1:]
    if raw.startswith("/"):
        return raw
    return None  # vsock: addresses (systemd >= 254 in VMs) and anything unknown


def _one_line(text: str) -> str:
    """A value may not contain a newline: it would start a new assignment in the datagram."""
    return " ".join(text.splitlines())


class SystemdNotifier:
    """Tells the service manager about readiness, status, reloads, shutdown and liveness.

    Safe to share between threads: every message opens its own datagram socket, as sd_notify does.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._environ: Mapping[str, str] = dict(env)
        raw = env.get("NOTIFY_SOCKET", "")
        self._address = _socket_address(raw) if raw else None
        if raw and self._address is None:
            log.debug("NOTIFY_SOCKET=%r is not a unix socket address; notifications are off", raw)
        self._failure_logged = False

    @property
    def enabled(self) -> bool:
        """Whether a service manager is listening; False when not started by systemd with Type=notify."""
        return self._address is not None

    def notify(self, *assignments: str) -> bool:
        """Send KEY=VALUE assignments in one datagram; True when the service manager received them."""
        if self._address is None or not assignments:
            return False
        payload = "\n".join(assignments).encode("utf-8")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(payload, socket.MSG_DONTWAIT, self._address)
        except OSError as error:
            if not self._failure_logged:
                self._failure_logged = True
                log.debug("sd_notify to %r failed (%s); further failures are not logged", self._address, error)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """The service has started: with Type=notify, systemd starts dependent units only after this."""
        if status is None:
            return self.notify("READY=1")
        return self.notify("READY=1", f"STATUS={_one_line(status)}")

    def status(self, text: str) -> bool:
        """A one-line state shown by `systemctl status`, e.g. which pipelines run and which wait."""
        return self.notify(f"STATUS={_one_line(text)}")

    def stopping(self) -> bool:
        """Shutdown has begun; systemd stops expecting watchdog pings and waits up to TimeoutStopSec."""
        return self.notify("STOPPING=1")

    def reloading(self) -> bool:
        """A reload has begun; send ready() when it is done.

        MONOTONIC_USEC lets Type=notify-reload (systemd >= 253) tell this reload from an earlier one;
        older versions ignore it and treat RELOADING=1 as a status change only.
        """
        now_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={now_usec}")

    def watchdog(self) -> bool:
        """The liveness ping WatchdogSec= expects; send it only when the service is really working."""
        return self.notify("WATCHDOG=1")

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for `seconds` more before the start (or stop) times out: for long model compiles.

        Must be repeated within each extension while the slow work goes on.
        """
        return self.notify(f"EXTEND_TIMEOUT_USEC={max(1, round(seconds * 1_000_000))}")

    def watchdog_interval(self) -> float | None:
        """WatchdogSec= in seconds as the environment this notifier was made from gives it."""
        return watchdog_interval(self._environ)
