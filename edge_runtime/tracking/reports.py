"""The tracker's answer for a frame: its table's confirmed real objects as `TrackedObject`s.

A frame's report is built column by column, one `tolist` per column and no Python call per object, because
it is made for every object in every analysed frame.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from edge_runtime.tracking.kalman import boxes_from_states
from edge_runtime.tracking.objects import TrackedObject
from edge_runtime.tracking.tracks import TrackTable

__all__ = ["Reporter"]

Array = npt.NDArray[np.float64]
Indices = npt.NDArray[np.intp]


class Reporter:
    """Reports a tracker's objects: those confirmed (`confirm_hits` matches in a row) and real."""

    def __init__(self, confirm_hits: int, stationary_after_s: float) -> None:
        self._confirm_hits = confirm_hits
        self._stationary_after_s = stationary_after_s
        # Position i holds i, and the last position (index -1, a missed track's) None: a detection index or
        # None for a whole frame's tracks in one map call. Grown to the largest frame seen (`expect`).
        self._index_or_none: list[int | None] = [None]

    def expect(self, detections: int) -> None:
        """Make ready for a frame of this many detections."""
        if detections >= len(self._index_or_none):
            self._index_or_none = [*range(2 * detections), None]

    def objects(
        self, tracks: TrackTable, now: float, detection_indices: Indices | None, shown_boxes: Array | None = None
    ) -> tuple[TrackedObject, ...]:
        """The confirmed real objects among `tracks`: present ones with their index in this frame's
        detections (-1: missed, box predicted), or ended ones (None) as they were last seen. `shown_boxes`,
        when given, are the present ones' boxes already, predicted where missed."""
        shown_mask = (tracks.hits >= self._confirm_hits) & tracks.real
        shown: slice | Indices
        if np.count_nonzero(shown_mask) == len(shown_mask):  # as on most frames: a slice indexes without copies
            shown = slice(None)
        else:
            shown = shown_mask.nonzero()[0]
            if len(shown) == 0:
                return ()
        boxes = tracks.last_boxes[shown]
        indices: list[int | None]
        if detection_indices is None:
            indices = [None] * len(boxes)
        else:
            found = detection_indices[shown]
            if shown_boxes is not None:
                boxes = shown_boxes[shown]
            else:
                coasting = found < 0
                if np.count_nonzero(coasting):
                    boxes = np.where(coasting[:, None], boxes_from_states(tracks.means[shown]), boxes)
            indices = list(map(self._index_or_none.__getitem__, found.tolist()))
        starts = tracks.start_times[shown]
        return tuple(
            map(
                _tracked_object,
                zip(
                    tracks.ids[shown].tolist(),
                    tracks.labels[shown].tolist(),
                    zip(*boxes.T.tolist(), strict=True),  # box tuples, from the four coordinate columns
                    tracks.last_scores[shown].tolist(),
                    tracks.top_scores[shown].tolist(),
                    (now - tracks.still_since[shown] >= self._stationary_after_s).tolist(),
                    tracks.hits[shown].tolist(),
                    starts.tolist(),
                    tracks.last_seen[shown].tolist(),
                    (now - starts).tolist(),
                    indices,
                    strict=True,
                ),
            )
        )


# A named tuple's constructor, and its `_make`, are Python functions around tuple.__new__: calling that
# directly on each row of fields (eleven, in field order) saves a Python call per object per frame.
_tracked_object = cast(Callable[[Iterable[Any]], TrackedObject], functools.partial(tuple.__new__, TrackedObject))
