"""How alike a track's predicted box and a detection are, and which detection goes with which track.

Two measures, for two situations:

- Overlap (intersection over union) is ByteTrack's and SORT's: at 10 fps and above an object moves a
  fraction of its size between frames, so its predicted box and its detection overlap well, and overlap
  does not depend on the object's size or the frame's resolution.
- Frigate's relative distance is for when overlap fails: at 5 fps a walking person or a passing car can
  move by more than its own width between frames, and a prediction that is a little off then overlaps
  nothing. The bottom centre (where an object stands on the ground) is compared, with the displacement
  measured in the predicted box's own widths and heights, plus how much the width and the height
  changed (larger over smaller, minus one); the distance is the Euclidean norm of those four numbers.
  Frigate matches up to 2.5.

The assignment itself is LAPJV (Jonker-Volgenant, `lap.lapjv`), the solver ByteTrack's reference code
uses: a rectangular cost matrix is extended internally, and `cost_limit` leaves a row and a column
unmatched rather than pair them at a cost above the limit.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import lap
import numpy as np
import numpy.typing as npt

__all__ = [
    "FORBIDDEN",
    "Assignment",
    "any_within_relative_distance",
    "assign",
    "iou_matrix",
    "paired_iou",
    "relative_distance_matrix",
]

Array = npt.NDArray[np.float64]
Indices = npt.NDArray[np.intp]

FORBIDDEN = 1e6  # the cost of a pair that must never match (different labels); far above any limit
_NOTHING: Indices = np.zeros(0, dtype=np.intp)


class Assignment(NamedTuple):
    """Matched (row, column) pairs, rows ascending, out of a cost matrix of `shape`."""

    rows: Indices
    columns: Indices
    shape: tuple[int, int]

    @property
    def unmatched_rows(self) -> Indices:
        return np.setdiff1d(np.arange(self.shape[0]), self.rows)

    @property
    def unmatched_columns(self) -> Indices:
        return np.setdiff1d(np.arange(self.shape[1]), self.columns)


def iou_matrix(first: Array, second: Array) -> Array:
    """Intersection over union of every box in `first` (N×4) with every box in `second` (M×4): N×M."""
    if len(first) == 0 or len(second) == 0:
        return np.zeros((len(first), len(second)))
    # Coordinates as rows (contiguous for the tracker's column-major boxes), x and y together: the extents
    # of every intersection as one 2×N×M array, in a dozen numpy calls whatever N and M.
    corners, others = first.T, second.T
    extents = np.minimum(corners[2:4, :, None], others[2:4, None, :])
    extents -= np.maximum(corners[0:2, :, None], others[0:2, None, :])
    np.maximum(extents, 0.0, out=extents)
    intersection = extents[0] * extents[1]
    first_sizes, second_sizes = corners[2:4] - corners[0:2], others[2:4] - others[0:2]
    union = (first_sizes[0] * first_sizes[1])[:, None] + second_sizes[0] * second_sizes[1]
    union -= intersection
    positive = union > 0
    if np.count_nonzero(positive) == positive.size:  # as for any real boxes: no pair to leave at 0
        return np.asarray(np.divide(intersection, union, out=intersection))
    return np.asarray(np.divide(intersection, union, out=np.zeros(intersection.shape), where=positive))


def paired_iou(first: Array, second: Array) -> Array:
    """Intersection over union of first[i] with second[i], for each i (both N×4): N values."""
    # x and y together, as (N, 2) arrays: the same arithmetic as coordinate by coordinate, in half the calls.
    first_sizes = first[:, 2:4] - first[:, 0:2]
    second_sizes = second[:, 2:4] - second[:, 0:2]
    overlaps = np.maximum(np.minimum(first[:, 2:4], second[:, 2:4]) - np.maximum(first[:, 0:2], second[:, 0:2]), 0.0)
    intersection = overlaps[:, 0] * overlaps[:, 1]
    union = first_sizes[:, 0] * first_sizes[:, 1] + second_sizes[:, 0] * second_sizes[:, 1] - intersection
    return np.asarray(np.divide(intersection, union, out=np.zeros(intersection.shape), where=union > 0))


def relative_distance_matrix(estimates: Array, detections: Array) -> Array:
    """Frigate's distance from every estimate (N×4 boxes) to every detection (M×4 boxes): N×M.

    0 means the same bottom centre and size; 1 is, for instance, a move by one box width.
    """
    if len(estimates) == 0 or len(detections) == 0:
        return np.zeros((len(estimates), len(detections)))
    estimate_width = np.maximum(estimates[:, 2] - estimates[:, 0], 1e-6)[:, None]
    estimate_height = np.maximum(estimates[:, 3] - estimates[:, 1], 1e-6)[:, None]
    detection_width = np.maximum(detections[:, 2] - detections[:, 0], 1e-6)
    detection_height = np.maximum(detections[:, 3] - detections[:, 1], 1e-6)
    shift_x = ((detections[:, 0] + detections[:, 2]) - (estimates[:, 0:1] + estimates[:, 2:3])) / (2 * estimate_width)
    shift_y = (detections[:, 3] - estimates[:, 3:4]) / estimate_height
    width_change = np.maximum(estimate_width, detection_width) / np.minimum(estimate_width, detection_width) - 1.0
    height_change = np.maximum(estimate_height, detection_height) / np.minimum(estimate_height, detection_height) - 1.0
    return np.asarray(np.sqrt(shift_x**2 + shift_y**2 + width_change**2 + height_change**2))


def any_within_relative_distance(estimates: Array, detections: Array, limit: float) -> bool:
    """Whether some pair's `relative_distance_matrix` entry is at most `limit`, in plain Python.

    The tracker asks this of the few tracks and detections its first stages left over, where usually no
    pair is near: a numpy matrix of a handful of entries costs a dozen calls of a microsecond each, the
    loops here a fraction of that. Every finite distance is the matrix's to the bit (the same operations
    in the same order, squares as products); where the matrix holds NaN (a NaN or infinite coordinate),
    this may answer True, so that a caller computing the matrix then finds the same pairs as without it.
    """
    candidates = [
        (x_min + x_max, y_max, max(x_max - x_min, 1e-6), max(y_max - y_min, 1e-6))  # max keeps a NaN first
        for x_min, y_min, x_max, y_max in detections.tolist()
    ]
    for x_min, y_min, x_max, y_max in estimates.tolist():
        width, height = max(x_max - x_min, 1e-6), max(y_max - y_min, 1e-6)
        centre, double_width = x_min + x_max, 2 * width
        for detection_centre, bottom, detection_width, detection_height in candidates:
            shift_x = (detection_centre - centre) / double_width
            shift_y = (bottom - y_max) / height
            width_change = (width / detection_width if width > detection_width else detection_width / width) - 1.0
            height_change = (
                height / detection_height if height > detection_height else detection_height / height
            ) - 1.0
            squares = (
                shift_x * shift_x + shift_y * shift_y + width_change * width_change + height_change * height_change
            )
            if math.sqrt(squares) <= limit:
                return True
    return False


def assign(cost: Array, limit: float) -> Assignment:
    """The pairing of rows with columns of least total cost, pairing nothing that costs more than `limit`.

    A pair costing at most the limit is never worse than leaving both unpaired, so a row and a column
    that are each other's only candidate are paired directly; on a typical frame that is most tracks,
    and the solver, whose time grows with the cube of what it is given, sees only the contested rest.
    Rows and columns with no candidate at all are left out of it too.
    """
    rows_count, columns_count = cost.shape
    if rows_count == 0 or columns_count == 0:
        return Assignment(_NOTHING, _NOTHING, (rows_count, columns_count))
    candidate = cost <= limit
    flat = candidate.ravel().nonzero()[0]  # row-major, rows ascending; far quicker than a 2-D nonzero
    if len(flat) == 0:  # as for most tracks missed and weak detections: nothing to pair
        return Assignment(_NOTHING, _NOTHING, (rows_count, columns_count))
    candidate_rows, candidate_columns = np.divmod(flat, columns_count)
    row_list, column_list = candidate_rows.tolist(), candidate_columns.tolist()
    if len(set(row_list)) == len(row_list) == len(set(column_list)):
        # No row and no column has a second candidate, as on most frames: every candidate pair is exclusive.
        return Assignment(candidate_rows, candidate_columns, (rows_count, columns_count))
    row_candidates = np.bincount(candidate_rows, minlength=rows_count)
    column_candidates = np.bincount(candidate_columns, minlength=columns_count)
    single_rows = (row_candidates == 1).nonzero()[0]
    their_columns = candidate[single_rows].argmax(axis=1)
    exclusive = column_candidates[their_columns] == 1
    rows, columns = single_rows[exclusive], their_columns[exclusive]

    contested_rows = row_candidates > 0
    contested_rows[rows] = False
    contested_columns = column_candidates > 0
    contested_columns[columns] = False
    if np.count_nonzero(contested_rows) and np.count_nonzero(contested_columns):
        row_indices, column_indices = contested_rows.nonzero()[0], contested_columns.nonzero()[0]
        contested = cost[row_indices[:, None], column_indices]
        _, row_to_column, _ = lap.lapjv(contested, extend_cost=True, cost_limit=limit)
        solved = (row_to_column >= 0).nonzero()[0]
        solved_rows, solved_columns = row_indices[solved], column_indices[row_to_column[solved]]
        within = cost[solved_rows, solved_columns] <= limit
        rows = np.concatenate([rows, solved_rows[within]])
        columns = np.concatenate([columns, solved_columns[within]])
        order = rows.argsort()
        rows, columns = rows[order], columns[order]
    return Assignment(rows, columns, (rows_count, columns_count))
