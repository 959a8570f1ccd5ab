"""What zones and lines share: names that become topic levels, points relative to the frame, and per-object state.

A zone's or a line's name becomes one level of its MQTT topics (`…/zone/<name>/occupied`), so a name
with `/` would split the topic, one with `+` or `#` would be a wildcard no broker accepts in a published
topic, and one starting with `$` would land among the broker's own topics. They are held to the rule
every name a user gives for a topic level follows (`edge_runtime.mqtt.topics.check_topic_name`), so that
the pipeline config and the zones and lines themselves apply one rule.

Zones and lines keep their state in arrays with one row per object, so that a frame's update is a few
array operations over all objects and all zones at once instead of a loop over pairs. `ObjectRows` hands
out those rows and takes back the rows of objects that ended, so memory follows the number of objects
present, not the number seen since start-up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from edge_runtime.mqtt.topics import check_topic_name
from edge_runtime.tracking.config import Point
from edge_runtime.tracking.objects import TrackedObject

__all__ = [
    "ObjectRows",
    "bottom_centres",
    "check_names",
    "check_relative_points",
    "grown",
]

Array = npt.NDArray[np.float64]
Indices = npt.NDArray[np.intp]
Value = TypeVar("Value")
Grown = TypeVar("Grown", bound=np.generic)


def check_names(regions: Mapping[str, Value], kind: str) -> Mapping[str, Value]:
    """The mapping unchanged if every key is a valid topic level; else one ValueError listing every bad name."""
    problems = []
    for name in regions:
        try:
            check_topic_name(name, kind)
        except ValueError as error:
            problems.append(str(error))
    if problems:
        raise ValueError("; ".join(problems))
    return regions


def check_relative_points(points: Iterable[Point], what: str) -> None:
    """A ValueError naming `what` ("polygon") and the points that are not fractions of the frame."""
    outside = [point for point in points if not all(0.0 <= value <= 1.0 for value in point)]
    if outside:
        raise ValueError(
            f"{what} has points outside the frame: {outside}; coordinates are fractions of the frame's width "
            "and height, from 0 to 1, with [0, 0] the top left corner"
        )


def bottom_centres(objects: Sequence[TrackedObject], frame_size: tuple[int, int]) -> Array:
    """Where each object stands (N×2): the middle of its box's bottom edge, as fractions of the frame.

    The bottom centre is where a person's feet or a car's wheels meet the ground, so it is the point that
    is in a zone drawn on the ground whatever the object's height (Frigate, DeepStream and supervision
    all use it).
    """
    width, height = frame_size
    if not objects:
        return np.zeros((0, 2))
    half_width, per_height = 0.5 / width, 1.0 / height
    feet = []
    for item in objects:  # one conversion of a list of pairs is twice as fast as array arithmetic on 20 boxes
        left, _, right, bottom = item.box
        feet.append(((left + right) * half_width, bottom * per_height))
    return np.array(feet, dtype=np.float64)


def grown(array: npt.NDArray[Grown], capacity: int, fill: float | bool) -> npt.NDArray[Grown]:
    """`array` with its first axis extended to `capacity` rows, the new rows set to `fill`."""
    extra = np.full((capacity - len(array), *array.shape[1:]), fill, dtype=array.dtype)
    return np.concatenate([array, extra])


class ObjectRows:
    """Rows of state arrays for the objects present: an object keeps its row until it is released.

    `capacity` only grows (doubling), to the most objects present at once; the owner extends its arrays
    when it does and clears a row when it is released, so a reused row starts from a clean state.
    """

    def __init__(self) -> None:
        self._rows: dict[str, int] = {}
        self._free: list[int] = []
        self.capacity = 0

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, object_id: object) -> bool:
        return object_id in self._rows

    def rows_of(self, object_ids: Iterable[str]) -> Indices:
        """The row of each id, giving new ids a free row (and growing `capacity` when none is free)."""
        rows = self._rows
        found = []
        for object_id in object_ids:
            row = rows.get(object_id)
            if row is None:
                row = rows[object_id] = self._take()
            found.append(row)
        return np.array(found, dtype=np.intp)

    def release(self, object_id: str) -> int | None:
        """Free the object's row and say which it was; None if the object had none."""
        row = self._rows.pop(object_id, None)
        if row is not None:
            self._free.append(row)
        return row

    def _take(self) -> int:
        if not self._free:
            used = self.capacity
            self.capacity = max(8, 2 * used)
            self._free = list(range(self.capacity - 1, used - 1, -1))
        return self._free.pop()
