"""Zones: which areas of the ground each tracked object is in, since when, and how many are in each.

An object is in a zone by where it stands, the bottom centre of its box (Frigate's rule): a person whose
head overlaps a drawn driveway while standing on the pavement is not on the driveway.

A detector's box jitters, so one frame's test is not trusted either way. Each (object, zone) pair keeps
a settled answer that changes only after `inertia` analysed frames in a row disagree with it: an object
enters after that many frames with its bottom centre inside and leaves after that many outside, so a
box flickering on the border neither enters nor leaves. Frigate uses the same count to enter, and leaves
at the first frame outside; leaving by the same count keeps occupancy steady for a person standing on
the border.

With `loitering_s` the object enters only once it has been settled inside that long, measured in capture
time because the interval between analysed frames is irregular (`max_fps`, the motion gate). Its arrival
is the capture time of the first of the frames that settled it inside, and its dwell time is measured
from there, so a zone with `loitering_s: 30` reports objects that have been there for at least 30 s and
says for how long. A flicker out shorter than `inertia` frames does not restart either clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from pydantic import Field, field_validator

from edge_runtime.config.base import StrictModel
from edge_runtime.tracking.config import Point, check_distinct
from edge_runtime.tracking.objects import TrackedObject, TrackUpdate
from edge_runtime.tracking.presence import ObjectZones
from edge_runtime.tracking.regions import (
    ObjectRows,
    bottom_centres,
    check_names,
    check_relative_points,
    grown,
)

__all__ = ["ZoneConfig", "ZoneReport", "Zones", "check_zone_names"]

Array = npt.NDArray[np.float64]
Flags = npt.NDArray[np.bool_]

SETTLED, STREAK, ENTERED = range(3)  # the fields of a zone's per-object state
STATE_FIELDS = 3


class ZoneConfig(StrictModel):
    """An area of the ground drawn on the image; an object is in it when its box's bottom centre is."""

    polygon: list[Point] = Field(
        description="the zone's outline as at least 3 [x, y] points, fractions of the frame's width and height "
        "(0-1, origin top left), in drawing order; the outline closes from the last point back to the first",
        examples=[[[0.05, 0.55], [0.95, 0.55], [0.95, 1.0], [0.05, 1.0]]],
    )
    labels: list[str] = Field(
        default_factory=list,
        description="labels of the objects the zone takes; others never enter it; empty: every tracked label",
    )
    inertia: int = Field(
        default=3,
        ge=1,
        description="analysed frames in a row an object's bottom centre must be inside before it enters, and "
        "outside before it leaves, so a box jittering on the border changes nothing (Frigate's inertia); "
        "1 follows every frame",
    )
    loitering_s: float = Field(
        default=0.0,
        ge=0,
        description="seconds of capture time an object must stay inside before it counts as in the zone "
        "(someone lingering at a gate, not walking past); 0: as soon as inertia allows",
    )

    @field_validator("polygon")
    @classmethod
    def _a_polygon_in_the_frame(cls, polygon: list[Point]) -> list[Point]:
        if len(polygon) < 3:
            raise ValueError(f"has {len(polygon)} points; a zone's polygon needs at least 3")
        check_relative_points(polygon, "the polygon")
        if _area(np.asarray(polygon, dtype=np.float64)) <= 0.0:
            raise ValueError(f"encloses no area: its points {polygon} lie on one line, so nothing is ever inside")
        return polygon

    @field_validator("labels")
    @classmethod
    def _distinct_labels(cls, labels: list[str]) -> list[str]:
        return check_distinct(labels)


def check_zone_names(zones: Mapping[str, ZoneConfig]) -> Mapping[str, ZoneConfig]:
    """The pipeline config's `zones`, unchanged, if every name can be an MQTT topic level; else a
    ValueError naming each bad name and what is wrong with it."""
    return check_names(zones, "zone")


def _area(polygon: Array) -> float:
    x, y = polygon[:, 0], polygon[:, 1]
    return abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))) / 2.0


@dataclass(frozen=True)
class ZoneReport:
    """The zones' answer for one frame."""

    objects: dict[str, ObjectZones]  # by track id, every object of the frame, in the frame's order
    ended: dict[str, ObjectZones]  # objects that ended in this frame: no current zone, their entered zones
    occupancy: dict[str, dict[str, int]]  # per zone in config order: label -> objects of it in the zone now


class Zones:
    """The zones of one camera and where each of its objects is. Not thread-safe: the post thread calls it.

    Every (object, zone) pair is updated at once as arrays with a row per object and a column per zone;
    the point-in-polygon test runs over the edges of all zones together (even-odd rule).
    """

    def __init__(self, zones: Mapping[str, ZoneConfig]) -> None:
        check_zone_names(zones)
        self.configs = dict(zones)
        self.names = tuple(zones)
        configs = tuple(zones.values())
        polygons = [np.asarray(config.polygon, dtype=np.float64) for config in configs]
        starts = np.concatenate(polygons) if polygons else np.zeros((0, 2))
        ends = np.concatenate([np.roll(polygon, -1, axis=0) for polygon in polygons]) if polygons else starts
        rise = ends[:, 1] - starts[:, 1]
        self._edge_start_x, self._edge_start_y = starts[:, 0], starts[:, 1]
        self._edge_end_y = ends[:, 1]
        self._edge_slope = (ends[:, 0] - starts[:, 0]) / np.where(rise == 0, 1.0, rise)  # dx per unit of y
        self._first_edges = np.cumsum([0] + [len(polygon) for polygon in polygons[:-1]]).astype(np.intp)
        self._inertia = np.array([config.inertia for config in configs], dtype=np.int32)
        self._loitering_s = np.array([config.loitering_s for config in configs], dtype=np.float64)
        self._loiters = bool(np.any(self._loitering_s > 0))
        self._zone_labels = [frozenset(config.labels) for config in configs]
        self._label_codes: dict[str, int] = {}
        self._takes = np.zeros((0, len(configs)), dtype=bool)  # label code × zone: the zone takes the label
        self._rows = ObjectRows()
        # Per row and zone: whether it is settled inside, frames in a row disagreeing with that, and whether
        # it has ever been in the zone; one array so that a frame reads and writes them in one operation.
        self._state = np.zeros((0, STATE_FIELDS, len(configs)), dtype=np.int32)
        self._arrived = np.zeros((0, len(configs)), dtype=np.float64)  # capture time of the first settling frame
        self._order: list[tuple[str, ...]] = []  # per row: zones entered, in the order of entry
        self._time = -np.inf

    def __len__(self) -> int:
        """Objects whose state is held: those present, until they end."""
        return len(self._rows)

    def update_from(self, update: TrackUpdate, frame_size: tuple[int, int]) -> ZoneReport:
        """`update` with the tracker's answer for a frame of `frame_size` (width, height) pixels."""
        return self.update(update.objects, update.ended, update.timestamp, frame_size)

    def update(
        self,
        objects: Sequence[TrackedObject],
        ended: Sequence[TrackedObject],
        timestamp: float,
        frame_size: tuple[int, int],
    ) -> ZoneReport:
        """Take one analysed frame's confirmed objects and those that ended in it, captured at `timestamp`
        (seconds), on a frame of `frame_size` (width, height) pixels. A timestamp earlier than the previous
        one counts as equal. Objects left out without having ended keep their state unchanged."""
        now = self._time = max(self._time, timestamp)
        occupancy: dict[str, dict[str, int]] = {name: {} for name in self.names}
        reports: dict[str, ObjectZones] = {}
        if objects:
            rows = self._rows.rows_of(item.id for item in objects)
            if self._rows.capacity > len(self._state):
                self._grow(self._rows.capacity)
            codes = self._codes_of(objects)  # before reading _takes, which a new label extends
            current, entering, arrived = self._advance(
                rows, bottom_centres(objects, frame_size), self._takes[codes], now
            )
            reports = self._report(objects, rows.tolist(), current, entering, now - arrived, occupancy)
        return ZoneReport(reports, self._end(ended), occupancy)

    def _advance(self, rows: npt.NDArray[np.intp], feet: Array, takes: Flags, now: float) -> tuple[Flags, Flags, Array]:
        """Step every (object, zone) pair by one frame: the pairs in the zone now, those among them in it for
        the first time, and each pair's arrival time. Most frames change no settled answer, and the work
        for a change is only done when one of the pairs disagrees with its settled answer."""
        inside = self._inside(feet) & takes
        state, arrived = self._state[rows], self._arrived[rows]
        settled = state[:, SETTLED] != 0
        disagree = inside != settled
        if disagree.any():
            streak = np.where(disagree, state[:, STREAK] + 1, 0)
            arrived[disagree & ~settled & (streak == 1)] = now
            self._arrived[rows] = arrived
            flip = streak >= self._inertia
            settled ^= flip
            streak[flip] = 0
            state[:, SETTLED], state[:, STREAK] = settled, streak
        else:
            state[:, STREAK] = 0
        current = settled & (now - arrived >= self._loitering_s) if self._loiters else settled
        entering = current & (state[:, ENTERED] == 0)
        state[:, ENTERED] |= entering
        self._state[rows] = state
        return current, entering, arrived

    def _inside(self, feet: Array) -> Flags:
        """Whether each point (N×2) is inside each zone (N×Z), by the even-odd rule over all edges at once."""
        if not self.names:
            return np.zeros((len(feet), 0), dtype=bool)
        x, y = feet[:, 0:1], feet[:, 1:2]
        start_y = self._edge_start_y
        straddles = (start_y > y) != (self._edge_end_y > y)
        crossings = straddles & (x - self._edge_start_x < (y - start_y) * self._edge_slope)  # left of the edge
        return np.asarray(np.logical_xor.reduceat(crossings, self._first_edges, axis=1), dtype=bool)

    def _report(
        self,
        objects: Sequence[TrackedObject],
        rows: list[int],
        current: Flags,
        entering: Flags,
        dwell: Array,
        occupancy: dict[str, dict[str, int]],
    ) -> dict[str, ObjectZones]:
        """Each object's answer, and the occupancy counted into `occupancy`. Loops run over the pairs in a
        zone only, which are few, rather than over every pair."""
        names, order = self.names, self._order
        if entering.any():
            for index, zone in zip(*np.nonzero(entering), strict=True):  # object by object, zones in config order
                order[rows[index]] += (names[zone],)
        in_zones: dict[int, dict[str, float]] = {}
        objects_in, zones_in = np.nonzero(current)
        times = dwell[objects_in, zones_in].tolist()
        for index, zone, seconds in zip(objects_in.tolist(), zones_in.tolist(), times, strict=True):
            name = names[zone]
            in_zones.setdefault(index, {})[name] = seconds
            counts = occupancy[name]
            label = objects[index].label
            counts[label] = counts.get(label, 0) + 1
        reports = {}
        for index, item in enumerate(objects):
            dwell_s = in_zones.get(index)
            entered = order[rows[index]]
            reports[item.id] = (
                ObjectZones((), entered, {}) if dwell_s is None else ObjectZones(tuple(dwell_s), entered, dwell_s)
            )
        return reports

    def _end(self, ended: Sequence[TrackedObject]) -> dict[str, ObjectZones]:
        """Each ended object's last answer (in no zone, with the zones it entered); its row is freed."""
        reports = {}
        for item in ended:
            row = self._rows.release(item.id)
            if row is None:
                reports[item.id] = ObjectZones()
                continue
            reports[item.id] = ObjectZones((), self._order[row], {})
            self._state[row] = 0
            self._arrived[row] = 0.0
            self._order[row] = ()
        return reports

    def _codes_of(self, objects: Sequence[TrackedObject]) -> npt.NDArray[np.intp]:
        codes = self._label_codes
        for item in objects:
            if item.label not in codes:
                self._add_label(item.label)
        return np.fromiter((codes[item.label] for item in objects), np.intp, len(objects))

    def _add_label(self, label: str) -> None:
        self._label_codes[label] = len(self._label_codes)
        takes = [not labels or label in labels for labels in self._zone_labels]
        self._takes = np.vstack([self._takes, np.array(takes, dtype=bool)[None, :]])

    def _grow(self, capacity: int) -> None:
        self._state = grown(self._state, capacity, 0)
        self._arrived = grown(self._arrived, capacity, 0.0)
        self._order.extend(() for _ in range(capacity - len(self._order)))
