"""Reconnecting after outages: outage bookkeeping and URLs safe to log.

A camera that drops off the network must come back without anyone restarting the daemon, but a
fleet of boxes retrying in lockstep can keep a recovering NVR down, hence the jittered backoff.
Each outage is reported when it starts, when it ends, and in between at intervals that grow to 15
minutes, so the log of a box whose camera is gone for a day holds about a hundred lines, not ten
thousand, and never goes quiet about a camera that is still away. The delays between attempts come
from `edge_runtime.backoff`.
"""

from __future__ import annotations

import logging
import threading
import time
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from edge_runtime.sources.base import SourceStats

log = logging.getLogger(__name__)

_SECRET_QUERY_KEYS = frozenset({"password", "passwd", "pwd", "pass", "token", "key", "secret", "auth"})
MASK = "***"


def mask_url(url: str) -> str:
    """The URL with its password (user info or a password-like query parameter) replaced by ***."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, has_password, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if has_password else netloc
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key.lower() in _SECRET_QUERY_KEYS for key, _ in pairs):
            masked = [(key, MASK if key.lower() in _SECRET_QUERY_KEYS else value) for key, value in pairs]
            query = urlencode(masked, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def spoken_duration(seconds: float) -> str:
    """`42 s`, `4 min 12 s`, `3 h 5 min`: how long, for a person reading a log."""
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


class ConnectionMonitor:
    """Keeps `connected`, `outages`, `reconnects` and `last_error` of a source's stats and logs outages.

    An outage starts when a connected source loses its input, or when the very first connection
    fails; it ends at the next successful connection, which counts as a reconnect. While it lasts,
    the log says so again after 1, 2, 4 and 8 minutes and then every `REMINDER_MAX_S`, with how long
    and when the next attempt comes: a person who looks at the log an hour later must not take the
    silence for a camera that works.
    """

    REMINDER_FIRST_S = 60.0
    REMINDER_MAX_S = 900.0

    def __init__(self, stats: SourceStats, source_name: str, target: str) -> None:
        self.stats = stats
        shown = mask_url(target)
        self.label = f"source {source_name}" if shown in source_name else f"source {source_name} ({shown})"
        self._lock = threading.Lock()
        self._in_outage = False
        self._outage_started = 0.0
        self._next_reminder = 0.0
        self._reminder_gap = self.REMINDER_FIRST_S
        self._next_try_at: float | None = None

    @property
    def in_outage(self) -> bool:
        return self._in_outage

    def outage(self) -> str | None:
        """While the input is unavailable: for how long, why, and when the next attempt comes."""
        with self._lock:
            if not self._in_outage:
                return None
            now = time.monotonic()
            said = f"unavailable for {spoken_duration(now - self._outage_started)} ({self.stats.last_error})"
            next_try_at = self._next_try_at
        if next_try_at is not None and next_try_at > now:
            said += f"; next try in {spoken_duration(next_try_at - now)}"
        return said

    def connected(self) -> None:
        with self._lock:
            ended = self._in_outage
            self._in_outage = False
            self._next_try_at = None
            with self.stats.lock:
                self.stats.connected = True
                self.stats.reconnects += int(ended)
        if ended:
            log.info("%s: reconnected after %s", self.label, spoken_duration(time.monotonic() - self._outage_started))

    def lost(self, reason: str, retry_in_s: float | None = None) -> None:
        """Record a failure and when the next attempt comes; the first of an outage is logged at WARNING,
        and reminders at growing intervals after it."""
        now = time.monotonic()
        with self._lock:
            starts_outage = not self._in_outage
            if starts_outage:
                self._in_outage = True
                self._outage_started = now
                self._reminder_gap = self.REMINDER_FIRST_S
                self._next_reminder = now + self._reminder_gap
            remind = not starts_outage and now >= self._next_reminder
            if remind:
                self._reminder_gap = min(2 * self._reminder_gap, self.REMINDER_MAX_S)
                self._next_reminder = now + self._reminder_gap
            self._next_try_at = None if retry_in_s is None else now + retry_in_s
            with self.stats.lock:
                self.stats.last_error = reason
                self.stats.connected = False
                self.stats.outages += int(starts_outage)
        retry = "" if retry_in_s is None else f"; next try in {spoken_duration(retry_in_s)}"
        if starts_outage:
            log.warning("%s: %s%s", self.label, reason, retry)
        elif remind:
            log.warning(
                "%s: still unavailable after %s: %s%s",
                self.label,
                spoken_duration(now - self._outage_started),
                reason,
                retry,
            )
        else:
            log.debug("%s: still unavailable: %s%s", self.label, reason, retry)

    def closed(self) -> None:
        with self.stats.lock:
            self.stats.connected = False
