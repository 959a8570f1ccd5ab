"""What zones and lines share: relative points, bottom centres, and rows that are reused."""

from __future__ import annotations

import numpy as np
import pytest
from standing import FRAME, standing

from edge_runtime.tracking.config import check_distinct
from edge_runtime.tracking.regions import (
    ObjectRows,
    bottom_centres,
    check_relative_points,
    grown,
)


def test_bottom_centres_are_fractions_of_the_frame() -> None:
    objects = [standing("a", 0.25, 0.75), standing("b", 0.5, 1.0)]
    assert bottom_centres(objects, FRAME).tolist() == [[0.25, 0.75], [0.5, 1.0]]
    assert bottom_centres(objects, (2 * FRAME[0], FRAME[1])).tolist() == [[0.125, 0.75], [0.25, 1.0]]
    assert bottom_centres([], FRAME).shape == (0, 2)


def test_rows_are_kept_per_object_and_reused_once_released() -> None:
    rows = ObjectRows()
    first = rows.rows_of(["a", "b", "c"]).tolist()
    assert len(set(first)) == 3 and rows.capacity >= 3 and len(rows) == 3
    assert rows.rows_of(["c", "a"]).tolist() == [first[2], first[0]]
    assert rows.release("b") == first[1] and rows.release("b") is None
    assert "b" not in rows and "a" in rows
    assert rows.rows_of(["d"]).tolist() == [first[1]]
    capacity = rows.capacity
    for index in range(1000):
        rows.rows_of([f"x{index}"])
        rows.release(f"x{index}")
    assert rows.capacity == capacity


def test_capacity_grows_to_the_most_objects_present_at_once() -> None:
    rows = ObjectRows()
    taken = rows.rows_of([str(index) for index in range(20)]).tolist()
    assert sorted(taken) == list(range(20)) and 20 <= rows.capacity <= 32


def test_grown_keeps_rows_and_fills_new_ones() -> None:
    array = np.array([[1, 2], [3, 4]], dtype=np.int8)
    extended = grown(array, 4, 0)
    assert extended.dtype == np.int8 and extended.tolist() == [[1, 2], [3, 4], [0, 0], [0, 0]]
    assert np.isnan(grown(np.zeros((1, 2)), 2, np.nan)[1]).all()


def test_labels_and_points_are_checked_with_their_reason() -> None:
    with pytest.raises(ValueError, match="labels listed twice: car"):
        check_distinct(["car", "person", "car"])
    with pytest.raises(ValueError, match="a zone must not be empty"):
        check_distinct(["yard", ""], "zone")
    with pytest.raises(ValueError, match=r"the line has points outside the frame: \[\(0.5, -0.1\)\]"):
        check_relative_points([(0.5, 0.5), (0.5, -0.1)], "the line")
    check_relative_points([(0.0, 0.0), (1.0, 1.0)], "the line")
