"""Reconnecting after outages: outage bookkeeping and URLs safe to log.

A camera that drops off the network must come back without anyone restarting the daemon, but a
fleet of boxes retrying in lockstep can keep a recovering NVR down, hence the jittered backoff.
Each outage is reported once, when it starts, and once more when it ends, so the log of a box
whose camera is gone for a day holds two lines and not ten thousand. The delays between attempts come
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


class ConnectionMonitor:
    """Keeps `connected`, `outages`, `reconnects` and `last_error` of a source's stats and logs outages.

    An outage starts when a connected source loses its input, or when the very first connection
    fails; it ends at the next successful connection, which counts as a reconnect.
    """

    def __init__(self, stats: SourceStats, source_name: str, target: str) -> None:
        self.stats = stats
        self.label = f"source {source_name} ({mask_url(target)})"
        self._lock = threading.Lock()
        self._in_outage = False
        self._outage_started = 0.0

    @property
    def in_outage(self) -> bool:
        return self._in_outage

    def connected(self) -> None:
        with self._lock:
            ended = self._in_outage
            self._in_outage = False
            with self.stats.lock:
                self.stats.connected = True
                self.stats.reconnects += int(ended)
        if ended:
            log.info("%s: reconnected after %.1f s", self.label, time.monotonic() - self._outage_started)

    def lost(self, reason: str) -> None:
        """Record a failure; only the first failure of an outage is logged at WARNING."""
        with self._lock:
            starts_outage = not self._in_outage
            if starts_outage:
                self._in_outage = True
                self._outage_started = time.monotonic()
            with self.stats.lock:
                self.stats.last_error = reason
                self.stats.connected = False
                self.stats.outages += int(starts_outage)
        if starts_outage:
            log.warning("%s: %s; reconnecting with backoff", self.label, reason)
        else:
            log.debug("%s: still unavailable: %s", self.label, reason)

    def closed(self) -> None:
        with self.stats.lock:
            self.stats.connected = False
