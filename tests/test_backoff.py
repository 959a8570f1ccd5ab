"""Backoff timing: doubling, its ceiling and the jitter that keeps a fleet out of step."""

from __future__ import annotations

import random

import pytest

from edge_runtime.backoff import Backoff


def test_backoff_doubles_up_to_the_maximum_with_bounded_jitter() -> None:
    backoff = Backoff(1.0, 8.0, 0.2, random.Random(7))
    delays = [backoff.next_delay() for _ in range(7)]
    for delay, base in zip(delays, [1, 2, 4, 8, 8, 8, 8], strict=True):
        assert 0.8 * base <= delay <= 1.2 * base
    assert len(set(delays)) == len(delays), "jitter should spread the delays"
    backoff.reset()
    assert 0.8 <= backoff.next_delay() <= 1.2


def test_backoff_without_jitter_is_exact() -> None:
    backoff = Backoff(0.5, 3.0, 0.0)
    assert [backoff.next_delay() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize(("initial_s", "max_s", "jitter"), [(0.0, 1.0, 0.1), (1.0, 0.0, 0.1), (1.0, 2.0, 1.5)])
def test_backoff_refuses_timings_that_make_no_sense(initial_s: float, max_s: float, jitter: float) -> None:
    with pytest.raises(ValueError, match="need initial_s > 0"):
        Backoff(initial_s, max_s, jitter)
