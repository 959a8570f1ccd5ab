"""Log lines about bad input, at a bounded rate.

A sensor that starts sending garbage at 100 Hz must not fill the disk of a box with identical
warnings, yet the first one has to appear at once, and the count of those held back must not be lost.
"""

from __future__ import annotations

import logging
import threading
import time


class ThrottledLog:
    """At most one line per `interval_s`; the next line says how many were held back since."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0, level: int = logging.WARNING) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.level = level
        self._lock = threading.Lock()
        self._last_logged: float | None = None
        self._suppressed = 0

    def log(self, message: str, *args: object) -> bool:
        """Log the line, or count it as suppressed; returns whether it was logged."""
        now = time.monotonic()
        with self._lock:
            if self._last_logged is not None and now - self._last_logged < self.interval_s:
                self._suppressed += 1
                return False
            suppressed, self._suppressed = self._suppressed, 0
            self._last_logged = now
        if suppressed:
            message += " (%d similar messages suppressed since the last one)"
            args = (*args, suppressed)
        self.logger.log(self.level, message, *args)
        return True
