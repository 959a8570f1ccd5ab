"""Tracked objects placed by where they stand, for the zone and line tests: a box whose bottom centre is at
a given point of the frame, given as fractions of its width and height like the zones and lines."""

from __future__ import annotations

from edge_runtime.tracking.objects import TrackedObject

FRAME = (1000, 500)  # not square, so that a mix-up of x and y or of width and height shows


def standing(object_id: str, x: float, y: float, label: str = "person") -> TrackedObject:
    """An object whose box (40×100 px) has its bottom centre at (x, y) of `FRAME`."""
    width, height = FRAME
    foot_x, foot_y = x * width, y * height
    box = (foot_x - 20.0, foot_y - 100.0, foot_x + 20.0, foot_y)
    return TrackedObject(object_id, label, box, 0.9, 0.9, False, 1, 0.0, 0.0, 0.0, 0)
