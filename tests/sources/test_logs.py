"""Rate-limited warnings about bad input."""

from __future__ import annotations

import logging
import time

import pytest

from edge_runtime.sources.logs import ThrottledLog


def test_one_line_per_interval_then_the_count_held_back(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("edge_runtime.sources.test_throttle")
    caplog.set_level(logging.WARNING, logger=logger.name)
    throttled = ThrottledLog(logger, interval_s=0.2)
    assert throttled.log("bad %s", 1)
    assert not any(throttled.log("bad %s", n) for n in range(2, 6))
    time.sleep(0.25)
    assert throttled.log("bad %s", 6)
    assert [r.getMessage() for r in caplog.records] == [
        "bad 1",
        "bad 6 (4 similar messages suppressed since the last one)",
    ]
