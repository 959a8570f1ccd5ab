"""Lines: objects counted as they cross a segment drawn on the image, in one direction or the other.

Which side of the line an object is on is decided by its box's bottom centre, where it stands, like
zones. A crossing is counted when both of these hold:

- The move that took the object to the new side went through the segment: the straight path from its
  bottom centre in the previous analysed frame to the one in this frame intersects the line segment.
  A fast object that is on one side in a frame and well past the line in the next is counted, as it
  would not be by a test of where it is (Ultralytics' polygon counter missed such jumps); an object
  that walks round the end of the segment is not, however long the segment's extension it crosses
  (supervision counted such objects before it added limits at the ends).
- The side is settled: the object had held the old side for `hold_frames` analysed frames in a row, and
  then holds the new side for as many. A box jittering on the line (sides A, A, A, B, A, A, A) never
  settles on B and counts nothing, in either direction (supervision counted such flickers).

The two are tied together: the move that counts is the last one onto the new side before the side
settled. If the object went through the segment, came back, and then passed beside the end onto the
new side and stayed there, it is not counted, since the move that put it where it settled did not go
through the line. Each settled change of side is counted once, so an object that comes back through
the line later is counted again, the other way.

A bottom centre exactly on the line is on neither side: that frame neither adds to the run on a side
nor breaks it, and the move that leaves the line is tested like any other (a move that starts on the
segment crosses it; one that starts on its extension does not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field, field_validator

from edge_runtime.config.base import StrictModel
from edge_runtime.tracking.config import Point, check_distinct
from edge_runtime.tracking.objects import TrackedObject, TrackUpdate
from edge_runtime.tracking.presence import Crossing, Direction, LineTotals
from edge_runtime.tracking.regions import (
    ObjectRows,
    bottom_centres,
    check_names,
    check_relative_points,
    grown,
)

__all__ = ["LEFT", "RIGHT", "LineConfig", "Lines", "Side", "check_line_names"]

Array = npt.NDArray[np.float64]
Flags = npt.NDArray[np.bool_]
Sides = npt.NDArray[np.int32]

Side = Literal["left", "right"]
RIGHT, LEFT = 1, -1  # the sign of (end - start) × (point - start) in image coordinates, where y points down
HELD, SIDE, RUN, THROUGH = range(4)  # the fields of a line's per-object state
STATE_FIELDS = 4


class LineConfig(StrictModel):
    """A counting line: a segment on the image, crossed one way to come in and the other way to go out."""

    points: list[Point] = Field(
        description="the line's start and end: two distinct [x, y] points, fractions of the frame's width and "
        "height (0-1, origin top left); only the segment between them counts, not its extension",
        examples=[[[0.3, 0.6], [0.7, 0.6]]],
    )
    inbound: Side = Field(
        description="the side an object moves onto when it comes in, as seen on the image looking from the "
        "line's start towards its end: for points [[0.3, 0.6], [0.7, 0.6]], drawn from left to right, "
        "'right' is below the line and 'left' above it, so with inbound: right an object walking down the "
        "image across the line comes in and one walking up goes out; swap the points to swap the sides",
        examples=["right"],
    )
    labels: list[str] = Field(
        default_factory=list,
        description="labels of the objects the line counts; others are never counted; empty: every tracked label",
    )
    hold_frames: int = Field(
        default=2,
        ge=1,
        description="analysed frames in a row an object must have been on the old side before it crossed, "
        "and must stay on the new side after, for the crossing to count, so a box jittering on the line "
        "counts nothing",
    )

    @field_validator("points")
    @classmethod
    def _two_distinct_points_in_the_frame(cls, points: list[Point]) -> list[Point]:
        if len(points) != 2:
            raise ValueError(f"has {len(points)} points; a line needs exactly 2, its start and its end")
        check_relative_points(points, "the line")
        if points[0] == points[1]:
            raise ValueError(f"start and end are the same point {points[0]}; a line needs two distinct points")
        return points

    @field_validator("labels")
    @classmethod
    def _distinct_labels(cls, labels: list[str]) -> list[str]:
        return check_distinct(labels)


def check_line_names(lines: Mapping[str, LineConfig]) -> Mapping[str, LineConfig]:
    """The pipeline config's `lines`, unchanged, if every name can be an MQTT topic level; else a
    ValueError naming each bad name and what is wrong with it."""
    return check_names(lines, "line")


class Lines:
    """The lines of one camera, the side each object is on, and the crossings counted since `since`.

    Not thread-safe: the post thread calls it. Every (object, line) pair is stepped at once as arrays with
    a row per object and a column per line.
    """

    def __init__(self, lines: Mapping[str, LineConfig], started_at: float) -> None:
        """`started_at`: when counting starts, in the same clock as the capture times (wall-clock seconds)."""
        check_line_names(lines)
        self.configs = dict(lines)
        self.names = tuple(lines)
        configs = tuple(lines.values())
        ends = np.array([config.points for config in configs], dtype=np.float64).reshape(len(configs), 2, 2)
        start, end = ends[:, 0], ends[:, 1]
        direction = end - start
        # (end - start) × (p - start) = p · (-dy, dx) + (dy·start_x - dx·start_y): one product for all pairs.
        self._normal = np.stack([-direction[:, 1], direction[:, 0]])
        self._offset = direction[:, 1] * start[:, 0] - direction[:, 0] * start[:, 1]
        # move × (corner - origin) = move · (corner_y, -corner_x) - move × origin, for each end of the line.
        self._start_turned = np.stack([start[:, 1], -start[:, 0]])
        self._end_turned = np.stack([end[:, 1], -end[:, 0]])
        self._hold = np.array([config.hold_frames for config in configs], dtype=np.int32)
        self._inbound = [RIGHT if config.inbound == "right" else LEFT for config in configs]
        self._line_labels = [frozenset(config.labels) for config in configs]
        self._label_codes: dict[str, int] = {}
        self._takes = np.zeros((0, len(configs)), dtype=bool)  # label code × line: the line counts the label
        self._rows = ObjectRows()
        self._previous = np.zeros((0, 2))  # per row: the object's bottom centre in the frame before
        # Per row and line: the settled side (0 while none is), the side of the current run (0 before any),
        # the frames in that run (at most hold_frames), and whether the move that started the run went
        # through the segment; one array so that a frame reads and writes them in one operation.
        self._state = np.zeros((0, STATE_FIELDS, len(configs)), dtype=np.int32)
        self._time = -np.inf
        self.reset(started_at)

    def __len__(self) -> int:
        """Objects whose state is held: those present, until they end."""
        return len(self._rows)

    def reset(self, since: float) -> None:
        """Start the counters again from zero at `since`; objects keep their sides, so one halfway across
        the line is counted when it settles."""
        self._since = since
        self._counts: dict[str, dict[str, dict[Direction, int]]] = {name: {} for name in self.names}

    def totals(self) -> dict[str, LineTotals]:
        """Per line in config order, the crossings counted since the start or the last reset."""
        totals = {}
        for name, by_label in self._counts.items():
            inbound = sum(counts["in"] for counts in by_label.values())
            outbound = sum(counts["out"] for counts in by_label.values())
            copied = {label: dict(counts) for label, counts in by_label.items()}
            totals[name] = LineTotals(self._since, inbound, outbound, copied)
        return totals

    def update_from(self, update: TrackUpdate, frame_size: tuple[int, int]) -> tuple[Crossing, ...]:
        """`update` with the tracker's answer for a frame of `frame_size` (width, height) pixels."""
        return self.update(update.objects, update.ended, update.timestamp, frame_size)

    def update(
        self,
        objects: Sequence[TrackedObject],
        ended: Sequence[TrackedObject],
        timestamp: float,
        frame_size: tuple[int, int],
    ) -> tuple[Crossing, ...]:
        """Take one analysed frame's confirmed objects and those that ended in it, captured at `timestamp`
        (seconds), on a frame of `frame_size` (width, height) pixels; the crossings this frame settled,
        by object in the frame's order, then by line in config order. A timestamp earlier than the
        previous one counts as equal. Objects left out without having ended keep their state."""
        now = self._time = max(self._time, timestamp)
        crossings: tuple[Crossing, ...] = ()
        if objects and self.names:
            rows = self._rows.rows_of(item.id for item in objects)
            if self._rows.capacity > len(self._state):
                self._grow(self._rows.capacity)
            codes = self._codes_of(objects)  # before reading _takes, which a new label extends
            takes = self._takes[codes]
            settled = self._advance(rows, bottom_centres(objects, frame_size), takes)
            if settled is not None and settled[0].any():
                crossings = self._count(objects, *settled, now)
        for item in ended:
            self._release(item.id)
        return crossings

    def _advance(self, rows: npt.NDArray[np.intp], points: Array, takes: Flags) -> tuple[Flags, Sides] | None:
        """Step every (object, line) pair by one frame; the pairs whose crossing it settled and their sides
        now, or None when it settled none (most frames: the work for a change of side is only done when
        an object changed side)."""
        previous = self._previous[rows]
        self._previous[rows] = points
        cross_now = points @ self._normal + self._offset
        side_now = np.sign(cross_now)
        state = self._state[rows]
        held, side, run, through = state[:, HELD], state[:, SIDE], state[:, RUN], state[:, THROUGH]  # views
        known = takes & (side_now != 0)
        run[known] += 1
        np.minimum(run, self._hold, out=run)
        changed = known & (side_now != side)
        if changed.any():
            through[changed] = self._through_segment(previous, points, cross_now)[changed]
            side[changed] = side_now[changed]
            run[changed] = 1
        settles = known & (run >= self._hold) & (side != held)
        if not settles.any():
            self._state[rows] = state
            return None
        counted = settles & (held != 0) & (through != 0)
        held[settles] = side[settles]
        through[settles] = 0
        self._state[rows] = state
        return counted, held

    def _through_segment(self, previous: Array, points: Array, cross_now: Array) -> Flags:
        """Whether each object's move from `previous` to `points` (N×2) meets each line segment (N×L),
        ends included; a move from an unknown previous point (NaN) meets none."""
        cross_before = previous @ self._normal + self._offset
        move = points - previous
        move_cross_origin = (move[:, 0] * previous[:, 1] - move[:, 1] * previous[:, 0])[:, None]
        start_side = move @ self._start_turned - move_cross_origin
        end_side = move @ self._end_turned - move_cross_origin
        return np.asarray((cross_before * cross_now <= 0) & (start_side * end_side <= 0), dtype=bool)

    def _count(
        self, objects: Sequence[TrackedObject], counted: Flags, sides: Sides, now: float
    ) -> tuple[Crossing, ...]:
        crossings = []
        objects_counted, lines_crossed = np.nonzero(counted)
        for index, line in zip(objects_counted.tolist(), lines_crossed.tolist(), strict=True):
            item, name = objects[index], self.names[line]
            direction: Direction = "in" if sides[index, line] == self._inbound[line] else "out"
            counts = self._counts[name].setdefault(item.label, {"in": 0, "out": 0})
            counts[direction] += 1
            crossings.append(Crossing(name, direction, item.id, item.label, now))
        return tuple(crossings)

    def _release(self, object_id: str) -> None:
        row = self._rows.release(object_id)
        if row is not None:
            self._previous[row] = np.nan
            self._state[row] = 0

    def _codes_of(self, objects: Sequence[TrackedObject]) -> npt.NDArray[np.intp]:
        codes = self._label_codes
        for item in objects:
            if item.label not in codes:
                codes[item.label] = len(codes)
                takes = [not labels or item.label in labels for labels in self._line_labels]
                self._takes = np.vstack([self._takes, np.array(takes, dtype=bool)[None, :]])
        return np.fromiter((codes[item.label] for item in objects), np.intp, len(objects))

    def _grow(self, capacity: int) -> None:
        self._previous = grown(self._previous, capacity, np.nan)
        self._state = grown(self._state, capacity, 0)
