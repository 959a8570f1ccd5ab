"""How many objects are where, as retained MQTT states, and each line crossing as it happens.

Retained states (a count per label and for `all`, per zone per label and `all`, a zone's occupancy
`ON`/`OFF`, a line's totals) tell a subscriber that connects at any time what is there now. They carry a
danger Frigate users met (frigate-hass-integration#662, #738): a box that restarts, or loses its broker
while a person stands in the yard, leaves `occupied ON` retained for ever unless it says otherwise. So
`PresenceCounts` answers two questions:

- `update`: what changed in this frame, to publish only that (a parked car changes nothing);
- `full_state`: every retained state's value now, to publish at start-up (zeros and OFF before the first
  frame) and after every reconnect. Every configured label, zone and line is in it, even at zero, and so
  is every label that has been counted since, because its retained topic exists on the broker.

Labels are those given (a pipeline's tracked labels, or its model's labels when it tracks every label);
a label met that was not given joins the counts from then on. `all` is the count over every label, so a
label called `all` is counted only in it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from edge_runtime.tracking.objects import TrackUpdate
from edge_runtime.tracking.presence import Crossing, LineTotals, ObjectZones

if TYPE_CHECKING:  # topics are built by the MQTT package; counts only name what they are about
    from edge_runtime.mqtt.topics import Topics

__all__ = [
    "ALL",
    "CountsChange",
    "CrossingMessage",
    "LineTotalsState",
    "ObjectCount",
    "PresenceCounts",
    "RetainedState",
    "ZoneOccupancy",
    "crossing_message",
    "totals_message",
]

ALL = "all"  # the label level of a count over every label (mqtt.topics.ALL_LABELS)


def _json(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class ObjectCount:
    """Objects of `label` (or `all`) present in the frame, or within `zone`."""

    label: str
    count: int
    zone: str | None = None
    retain: ClassVar[bool] = True

    def topic(self, topics: Topics, pipeline: str) -> str:
        if self.zone is None:
            return topics.count(pipeline, self.label)
        return topics.zone_count(pipeline, self.zone, self.label)

    def payload(self) -> bytes:
        return str(self.count).encode()


@dataclass(frozen=True)
class ZoneOccupancy:
    """Whether any counted object is in the zone: `ON` / `OFF`, as Home Assistant's binary sensors read."""

    zone: str
    occupied: bool
    retain: ClassVar[bool] = True

    def topic(self, topics: Topics, pipeline: str) -> str:
        return topics.zone_occupied(pipeline, self.zone)

    def payload(self) -> bytes:
        return b"ON" if self.occupied else b"OFF"


@dataclass(frozen=True)
class LineTotalsState:
    """A line's crossings since its counters started (schema: totals.schema.json)."""

    line: str
    message: dict[str, Any]
    retain: ClassVar[bool] = True

    def topic(self, topics: Topics, pipeline: str) -> str:
        return topics.line_totals(pipeline, self.line)

    def payload(self) -> bytes:
        return _json(self.message)


@dataclass(frozen=True)
class CrossingMessage:
    """One crossing, sent once and not retained (schema: crossing.schema.json)."""

    line: str
    message: dict[str, Any]
    retain: ClassVar[bool] = False

    def topic(self, topics: Topics, pipeline: str) -> str:
        return topics.line_crossing(pipeline, self.line)

    def payload(self) -> bytes:
        return _json(self.message)


RetainedState = ObjectCount | ZoneOccupancy | LineTotalsState


@dataclass(frozen=True)
class CountsChange:
    """What one frame changed: retained states to publish again, and the crossings it settled."""

    retained: tuple[RetainedState, ...] = ()
    crossings: tuple[CrossingMessage, ...] = ()


def crossing_message(crossing: Crossing) -> dict[str, Any]:
    return {
        "line": crossing.line,
        "direction": crossing.direction,
        "track_id": crossing.track_id,
        "label": crossing.label,
        "time": round(crossing.time, 3),
    }


def totals_message(totals: LineTotals, labels: Sequence[str] = ()) -> dict[str, Any]:
    """A line's totals as published; every label in `labels` appears, at zero if none crossed."""
    by_label = {label: {"in": 0, "out": 0} for label in labels}
    for label, directions in totals.by_label.items():
        by_label[label] = {"in": directions.get("in", 0), "out": directions.get("out", 0)}
    return {"in": totals.inbound, "out": totals.outbound, "by_label": by_label, "since": round(totals.since, 3)}


Places = tuple[tuple[str, tuple[str, ...]], ...]  # per object of a frame: its label and its current zones
Key = tuple[str, ...]  # ("count", label), ("zone", zone, label), ("occupied", zone), ("line", line)


class PresenceCounts:
    """The retained counts of one pipeline, from each frame's objects, zones and lines.

    `zones` and `lines` map each name to the labels it counts (empty: every label), as configured.
    Values are kept plain (numbers, flags, the totals' messages) and made into states only when they
    change or the whole state is asked for: most frames change nothing."""

    def __init__(
        self,
        labels: Sequence[str],
        started_at: float,
        zones: Mapping[str, Sequence[str]] | None = None,
        lines: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self._labels: list[str] = [label for label in dict.fromkeys(labels) if label != ALL]
        # the labels each zone and line counts; those counting every label share `_labels`, so they follow it
        self._zones = {zone: self._scope(own) for zone, own in (zones or {}).items()}
        self._lines = {line: self._scope(own) for line, own in (lines or {}).items()}
        self._totals = {line: LineTotals(since=started_at) for line in self._lines}
        self._line_messages = {line: totals_message(self._totals[line], self._lines[line]) for line in self._lines}
        self._values = self._measure(Counter(), {zone: Counter() for zone in self._zones})
        self._places: Places = ()  # the last frame's objects as (label, current zones): what the counts come from

    def full_state(self) -> tuple[RetainedState, ...]:
        """Every retained state's current value: for start-up and after every reconnect."""
        return tuple(_state(key, value) for key, value in self._values.items())

    def update(
        self,
        update: TrackUpdate,
        zones: Mapping[str, ObjectZones] | None = None,
        crossings: Sequence[Crossing] = (),
        line_totals: Mapping[str, LineTotals] | None = None,
    ) -> CountsChange:
        """Take a frame's objects, their zones, the crossings it settled and the lines' totals (a line
        missing from `line_totals` keeps its last totals); answer what changed."""
        labels_known = len(self._labels)
        zones = zones or {}
        places = tuple((obj.label, zones[obj.id].current if obj.id in zones else ()) for obj in update.objects)
        moved = places != self._places  # else no count of objects changed
        if moved:
            for label, _ in places:
                self._meet(label)
        for line, totals in (line_totals or {}).items():
            if line in self._totals and totals is not self._totals[line]:
                self._totals[line] = totals
                for label in totals.by_label:
                    self._meet(label)
                self._line_messages[line] = totals_message(totals, self._lines[line])
                moved = True
        changed: tuple[RetainedState, ...] = ()
        if moved:
            self._places = places
            changed = self._count(places, labels_known)
        settled = tuple(CrossingMessage(c.line, crossing_message(c)) for c in crossings if c.line in self._lines)
        return CountsChange(changed, settled)

    def _count(self, places: Places, labels_known: int) -> tuple[RetainedState, ...]:
        """Count the frame's objects by label, overall and per zone, and answer the states that changed."""
        present = Counter(label for label, _ in places)
        within: dict[str, Counter[str]] = {zone: Counter() for zone in self._zones}
        for label, current in places:
            for zone in current:
                counted = self._zones.get(zone)
                if counted is not None and label in counted:
                    within[zone][label] += 1
        if len(self._labels) != labels_known:  # lines counting every label show the new ones at zero
            self._line_messages = {line: totals_message(self._totals[line], self._lines[line]) for line in self._lines}
        values = self._measure(present, within)
        previous = self._values
        self._values = values
        return tuple(_state(key, value) for key, value in values.items() if previous.get(key) != value)

    def _scope(self, own: Sequence[str]) -> list[str]:
        return list(dict.fromkeys(own)) if own else self._labels

    def _meet(self, label: str) -> None:
        """A label counted for the first time joins the counts (and the zones and lines that count all)."""
        if label not in self._labels and label != ALL:
            self._labels.append(label)  # and so to every zone and line that counts every label

    def _measure(self, present: Counter[str], within: Mapping[str, Counter[str]]) -> dict[Key, Any]:
        values: dict[Key, Any] = {("count", label): present[label] for label in self._labels}
        values["count", ALL] = sum(present.values())
        for zone, labels in self._zones.items():
            counted = within[zone]
            for label in labels:
                values["zone", zone, label] = counted[label]
            total = sum(counted.values())
            values["zone", zone, ALL] = total
            values["occupied", zone] = total > 0
        for line, message in self._line_messages.items():
            values["line", line] = message
        return values


def _state(key: Key, value: Any) -> RetainedState:
    """The retained state a plain value stands for."""
    if key[0] == "count":
        return ObjectCount(key[1], value)
    if key[0] == "zone":
        return ObjectCount(key[2], value, key[1])
    if key[0] == "occupied":
        return ZoneOccupancy(key[1], value)
    return LineTotalsState(key[1], value)
