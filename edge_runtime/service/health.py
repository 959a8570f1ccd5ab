"""Whether the daemon is doing its work, for whoever asks from outside: `edge-runtime health`, a container's
HEALTHCHECK, Compose's `healthcheck`.

Under systemd the watchdog restarts a daemon whose work stalls; in a container nothing reads its pings, and the
HTTP health endpoints exist only when serving is on. So the daemon also writes the watchdog's view to
`health.json` in its state directory every few seconds, and `edge-runtime health` reads it back: healthy while
the report is fresh and nothing in it has stalled. There is one definition of healthy, the watchdog's, and the
watchdog watches one more thing than the pipelines: the delivery of their results (`DELIVERY`).

Delivery advances while the spool is empty or the broker acknowledges what it is sent; it waits, alive, while
the broker is known to be down and the results go to the spool; it stalls when the broker is connected but
acknowledges nothing for the stall window (a hung broker, a connection dead without a reset). A daemon that
stops writing the report (frozen, killed, its threads wedged) goes stale after the same window.

The report is stamped with the monotonic clock and the boot id: a wall clock set late at boot (boxes without a
real-time clock) cannot make it look fresh or stale, and a report left by a daemon killed before a reboot is
never taken for a fresh one. It is written without fsync: a report lost in a power cut is rewritten seconds
after the next start, and a box on flash is spared one synced write every few seconds.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_runtime.mqtt.publisher import PublisherStats
from edge_runtime.service.watchdog import PipelineHealth, ProgressWatchdog

__all__ = ["DELIVERY", "HEALTH_FILE", "DeliveryProgress", "HealthReporter", "Verdict", "judge_report"]

log = logging.getLogger(__name__)

DELIVERY = "mqtt delivery"  # a pipeline name cannot hold whitespace, so this never collides with one
HEALTH_FILE = "health.json"
OBSERVE_EVERY_S = 1.0
WRITE_EVERY_S = 5.0
_MAX_REPORT_BYTES = 1 << 20
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str:
    """This boot's id, empty where the kernel does not give one."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


class DeliveryProgress:
    """Turns the publisher's counters into the watchdog's signs of life for `DELIVERY`."""

    def __init__(self, watchdog: ProgressWatchdog, publisher_stats: Callable[[], PublisherStats]) -> None:
        self._watchdog = watchdog
        self._stats = publisher_stats
        self._answered = -1

    def observe(self) -> None:
        stats = self._stats()
        answered = stats.acked + stats.rejected  # a refusal also takes a message out of the spool
        before, self._answered = self._answered, answered
        if stats.spool_messages == 0 and stats.in_flight == 0:
            self._watchdog.beat(DELIVERY)
        elif not stats.connected:
            self._watchdog.waiting(DELIVERY, f"broker {stats.broker} unreachable, {stats.spool_messages} spooled")
        elif answered > before >= 0:
            self._watchdog.beat(DELIVERY)
        # connected, results waiting and nothing acknowledged since the last look: no sign of life


class HealthReporter:
    """Watches delivery and writes the watchdog's view to `path`, from a thread of its own."""

    def __init__(
        self,
        watchdog: ProgressWatchdog,
        publisher_stats: Callable[[], PublisherStats],
        path: Path,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._watchdog = watchdog
        self._delivery = DeliveryProgress(watchdog, publisher_stats)
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._written = ""
        self._written_at = float("-inf")
        self.remove()  # a report a killed daemon left behind says nothing about this one

    def start(self) -> None:
        """Begin watching delivery (registering it with the watchdog) and writing the report."""
        self._watchdog.register(DELIVERY)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="health-report", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self.step()
            except Exception:  # the report must outlive a full disk or a bug in one pass
                log.exception("writing the health report %s failed", self.path)
            if self._stop.wait(OBSERVE_EVERY_S):
                return

    def step(self) -> None:
        """One look at delivery; the report is written when it changed, and every WRITE_EVERY_S regardless."""
        self._delivery.observe()
        parts = self._watchdog.health()
        states = json.dumps([(p.name, p.state, p.reason) for p in parts])
        now = self._clock()
        if states != self._written or now - self._written_at >= WRITE_EVERY_S:
            self._write(parts, now)
            self._written, self._written_at = states, now

    def _write(self, parts: tuple[PipelineHealth, ...], now: float) -> None:
        report = {
            "written_at": now,
            "boot_id": boot_id(),
            "pid": os.getpid(),
            "stale_after_s": self._watchdog.stall_after + WRITE_EVERY_S,
            "parts": [
                {
                    "name": p.name,
                    "state": p.state,
                    "beats": p.beats,
                    "silent_s": round(p.silent_s, 1),
                    "reason": p.reason,
                }
                for p in parts
            ],
        }
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        temporary.write_text(json.dumps(report))
        temporary.replace(self.path)

    def stop(self) -> None:
        """Stop writing and remove the report: a stopped daemon is not a healthy one."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        self.remove()

    def remove(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError as error:
            log.warning("cannot remove the health report %s: %s", self.path, error.strerror)


@dataclass(frozen=True)
class Verdict:
    healthy: bool
    summary: str  # one line, for the health check's log
    report: dict[str, Any] | None  # the report as read, when one could be


def judge_report(path: Path, clock: Callable[[], float] = time.monotonic) -> Verdict:
    """Healthy when a report at `path` is from this boot, fresher than its own stall window, and nothing in it
    has stalled. The file is read as untrusted: anything malformed is unhealthy, never a traceback."""
    try:
        with path.open("rb") as file:
            raw = file.read(_MAX_REPORT_BYTES + 1)
    except FileNotFoundError:
        return Verdict(False, f"no daemon is running with its state in {path.parent} (no {path.name})", None)
    except OSError as error:
        return Verdict(False, f"cannot read {path}: {error.strerror}", None)
    report = _parse(raw)
    if report is None:
        return Verdict(False, f"{path} is not a health report", None)
    if report["boot_id"] != boot_id():
        return Verdict(False, f"{path} is from an earlier boot: no daemon has reported since", report)
    age = clock() - report["written_at"]
    if age > report["stale_after_s"]:
        return Verdict(False, f"the daemon has not reported for {age:.0f} s: it is hung or gone", report)
    parts = report["parts"]
    stalled = [p for p in parts if p["state"] == "stalled"]
    if stalled:
        described = "; ".join(_describe(p) for p in stalled)
        return Verdict(False, f"stalled: {described}", report)
    return Verdict(True, "healthy: " + ("; ".join(_describe(p) for p in parts) or "no pipelines"), report)


def _describe(part: dict[str, Any]) -> str:
    if part["state"] == "stalled":
        last = f", last waiting ({part['reason']})" if part["reason"] else f" after {part['beats']} results"
        return f"{part['name']} silent for {part['silent_s']:.0f} s{last}"
    if part["state"] == "waiting":
        return f"{part['name']} waiting ({part['reason']})"
    return f"{part['name']} advancing"


def _parse(raw: bytes) -> dict[str, Any] | None:
    if len(raw) > _MAX_REPORT_BYTES:
        return None
    try:
        report = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(report, dict) or not isinstance(report.get("parts"), list):
        return None
    numbers_ok = all(_is_number(report.get(key)) for key in ("written_at", "stale_after_s"))
    if not numbers_ok or not isinstance(report.get("boot_id"), str):
        return None
    for part in report["parts"]:
        if not (
            isinstance(part, dict)
            and isinstance(part.get("name"), str)
            and part.get("state") in ("advancing", "waiting", "stalled")
            and isinstance(part.get("beats"), int)
            and _is_number(part.get("silent_s"))
            and isinstance(part.get("reason"), str)
        ):
            return None
    return report


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
