"""Jittered exponential backoff, for everything that reconnects: cameras, sensors, brokers.

A fleet of boxes that lost the same thing at the same moment must not retry in step, or they keep a
recovering camera server or broker node down; each delay is therefore spread by a random fraction.
"""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Delays that double from `initial_s` up to `max_s`, each spread by ±`jitter` of itself."""

    def __init__(self, initial_s: float, max_s: float, jitter: float, rng: random.Random | None = None) -> None:
        if initial_s <= 0 or max_s <= 0 or not 0 <= jitter <= 1:
            raise ValueError(f"need initial_s > 0, max_s > 0 and 0 <= jitter <= 1; got {initial_s}, {max_s}, {jitter}")
        self.initial_s = initial_s
        self.max_s = max_s
        self.jitter = jitter
        self._attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        base = min(self.max_s, self.initial_s * 2.0 ** min(self._attempt, 62))
        self._attempt += 1
        spread = self.jitter * base
        return max(0.0, base + self._rng.uniform(-spread, spread))

    def reset(self) -> None:
        self._attempt = 0
