"""Polling for a condition with a deadline, for tests that watch other threads or processes."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], bool], timeout: float = 10.0, interval: float = 0.01) -> bool:
    """True as soon as `condition()` holds, False if it still does not after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True
