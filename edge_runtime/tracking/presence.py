"""What the zones and lines of a camera say about its objects, as plain values the events and counts read.

Zones and lines are kept apart from events and counts: zones and lines decide *where* an object is and
*when* it crossed, from its bottom centre over time; events and counts decide *what to tell* subscribers.
These types are the whole interface between the two halves, so either can change without the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Crossing", "Direction", "LineTotals", "ObjectZones"]

Direction = Literal["in", "out"]


@dataclass(frozen=True)
class ObjectZones:
    """One object's place among the zones, as of the latest analysed frame."""

    current: tuple[str, ...] = ()  # zones it is in now, in the order they are configured
    entered: tuple[str, ...] = ()  # every zone it has entered in its life, in the order it entered them
    dwell_s: dict[str, float] = field(default_factory=dict)  # seconds in each current zone since it entered


@dataclass(frozen=True)
class Crossing:
    """An object crossed a line: counted once, at the capture time of the frame that settled it."""

    line: str
    direction: Direction
    track_id: str
    label: str
    time: float


@dataclass(frozen=True)
class LineTotals:
    """Crossings of one line since `since` (the time the counters started: start-up or a reset)."""

    since: float
    inbound: int = 0
    outbound: int = 0
    by_label: dict[str, dict[Direction, int]] = field(default_factory=dict)
