"""Every live track as rows of arrays, and the score history that decides when a track is a real object.

One row per track, one array per attribute, so that the per-frame work (predicting, comparing, ageing,
judging scores) is a handful of numpy operations whatever the number of tracks, instead of a Python loop
over track objects, which is where trackers built that way spend most of their time.

The score history is Frigate's false-positive rule: the last 10 scores of a track, 0 for an analysed frame
in which it was missed or matched only by a detection below its label's `min_score`; while it holds
fewer than 3 scores it is padded with zeros to 3. A track becomes a real object once the median reaches
its label's `threshold`, and stays one ("once a true positive, always a true positive"), so a real object
that is partly hidden for a while is not taken back. The padding means one lucky frame is never enough:
two of the first three frames must score at `threshold`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from edge_runtime.tracking.kalman import zero_spreads

__all__ = ["HISTORY_LENGTH", "HISTORY_PADDING", "TrackTable", "blockwise", "median_scores", "take_rows"]

Array = npt.NDArray[np.float64]

HISTORY_LENGTH = 10
HISTORY_PADDING = 3
FEW_YOUNG_ROWS = 8  # up to this many rows not yet full, `median_scores` takes them one by one


def take_rows(array: npt.NDArray[Any], rows: npt.NDArray[np.intp]) -> npt.NDArray[Any]:
    """`array[rows]`, in the same layout as the table's arrays (see `TrackTable`): column-major, or for the
    spreads the track axis last in memory (`zero_spreads`)."""
    if array.ndim == 3 and not array.flags.f_contiguous:
        stacked: npt.NDArray[Any] = np.take(array.transpose(1, 2, 0), rows, axis=-1).transpose(2, 0, 1)
        return stacked
    taken: npt.NDArray[Any] = np.take(array.T, rows, axis=-1).T
    return taken


def blockwise(spreads: Array) -> Array:
    """A copy of `spreads` in the layout the table keeps them in (`zero_spreads`), whatever theirs."""
    laid_out = zero_spreads(len(spreads))
    np.copyto(laid_out, spreads)
    return laid_out


def median_scores(history: Array) -> Array:
    """The median of each row's recorded scores (NaN marks no score yet; recorded scores are rightmost),
    padded with zeros to `HISTORY_PADDING` scores."""
    if len(history) == 0:
        return np.zeros(0)
    # Rows not yet full, a track's first ten frames: the scores are rightmost, so their first place is empty.
    young = np.isnan(history[:, 0]).nonzero()[0]
    if len(young) > FEW_YOUNG_ROWS:  # many new tracks at once: every row at once
        return _padded_medians(history)
    middle = HISTORY_LENGTH // 2
    ordered = np.sort(history, axis=1)
    medians = (ordered[:, middle - 1] + ordered[:, middle]) / 2
    for row in young.tolist():  # usually a new track or two, faster in Python than a dozen numpy calls
        recorded = [score for score in history[row].tolist() if score == score]
        if len(recorded) < HISTORY_PADDING:  # the padding fills the places left of the scores
            recorded[:0] = [0.0] * (HISTORY_PADDING - len(recorded))
        recorded.sort()
        count = len(recorded)
        medians[row] = (recorded[(count - 1) // 2] + recorded[count // 2]) / 2
    return np.asarray(medians)


def _padded_medians(history: Array) -> Array:
    """`median_scores` of every row by padding them all, sorting, and picking each row's middle."""
    padded = history.copy()
    tail = padded[:, -HISTORY_PADDING:]
    tail[np.isnan(tail)] = 0.0
    counts = HISTORY_LENGTH - np.isnan(padded).sum(axis=1)
    ordered = np.sort(padded, axis=1)  # NaN sorts last, so the recorded scores come first
    rows = np.arange(len(padded))
    return np.asarray((ordered[rows, (counts - 1) // 2] + ordered[rows, counts // 2]) / 2)


@dataclass
class TrackTable:
    """The live tracks; row i of every array is track i. Rows are added and dropped together.

    The arrays of several columns are column-major (Fortran order): each column, such as every track's
    centre x, is contiguous, so a step on some columns of all tracks (the filter's, mostly) runs as one
    loop over memory rather than one short loop per track: at a hundred tracks the filter's correction
    takes about a third less time. The spreads go further, each block entry of every coordinate being one
    run (`zero_spreads`). Row-major arrays give the same numbers, only more slowly; `select` and `extend`
    keep the layout.
    """

    means: Array  # (N, 8) filter states
    spreads: Array  # (N, 3, 4) the filter's covariance blocks (see `kalman`)
    label_codes: npt.NDArray[np.int64]  # (N,) index into the tracker's list of labels
    labels: npt.NDArray[np.object_]  # (N,) the label itself, for reports
    hits: npt.NDArray[np.int64]  # (N,)
    start_times: Array  # (N,) capture time of the first detection
    last_seen: Array  # (N,) capture time of the latest match
    missed_since: Array  # (N,) first analysed frame that missed it since its latest match; NaN if none did
    still_since: Array  # (N,) capture time at which its box last moved away from `anchors`
    anchors: Array  # (N, 4) the box where it last stopped
    last_boxes: Array  # (N, 4) the latest matched detection's box
    last_scores: Array  # (N,)
    history: Array  # (N, HISTORY_LENGTH) scores, newest last, NaN before the first
    top_scores: Array  # (N,) highest median reached
    real: npt.NDArray[np.bool_]  # (N,) the median reached the label's threshold at some point
    serials: npt.NDArray[np.int64]  # (N,) the tracker's running number for it, part of its id
    ids: npt.NDArray[np.object_]  # (N,) its id as reported, made once rather than formatted every frame

    @classmethod
    def empty(cls) -> TrackTable:
        return cls(
            means=np.zeros((0, 8), order="F"),
            spreads=zero_spreads(0),
            label_codes=np.zeros(0, dtype=np.int64),
            labels=np.zeros(0, dtype=object),
            hits=np.zeros(0, dtype=np.int64),
            start_times=np.zeros(0),
            last_seen=np.zeros(0),
            missed_since=np.zeros(0),
            still_since=np.zeros(0),
            anchors=np.zeros((0, 4), order="F"),
            last_boxes=np.zeros((0, 4), order="F"),
            last_scores=np.zeros(0),
            history=np.zeros((0, HISTORY_LENGTH), order="F"),
            top_scores=np.zeros(0),
            real=np.zeros(0, dtype=np.bool_),
            serials=np.zeros(0, dtype=np.int64),
            ids=np.zeros(0, dtype=object),
        )

    def __len__(self) -> int:
        return len(self.hits)

    def select(self, rows: npt.NDArray[np.bool_] | npt.NDArray[np.intp]) -> TrackTable:
        """The tracks at `rows` (a boolean mask or indices), as a table of their own."""
        indices: npt.NDArray[np.intp] = (
            rows.nonzero()[0] if rows.dtype == np.bool_ else rows.astype(np.intp, copy=False)
        )
        return TrackTable(**{name: take_rows(getattr(self, name), indices) for name in _COLUMNS})

    def extend(self, other: TrackTable) -> TrackTable:
        """These tracks followed by `other`'s."""
        if len(other) == 0:
            return self
        if len(self) == 0:  # an empty array counts as every layout at once, and could pass on the wrong one
            return other
        return TrackTable(**{name: _joined(getattr(self, name), getattr(other, name)) for name in _COLUMNS})


def _joined(first: npt.NDArray[Any], second: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """`first`'s rows followed by `second`'s, in the layout of whichever has several rows, or else the table's
    own: a one-row array is row- and column-major at once, and numpy would make their join row-major."""
    if first.ndim == 1:
        return np.concatenate([first, second])
    count = len(first) + len(second)
    model = first if len(first) > 1 or len(second) < 2 else second
    if len(model) > 1:
        out = np.empty_like(model, shape=(count, *model.shape[1:]))
    elif first.ndim == 3:
        out = zero_spreads(count)
    else:
        out = np.empty((count, *first.shape[1:]), first.dtype, order="F")
    return np.concatenate([first, second], out=out)


_COLUMNS = tuple(field.name for field in fields(TrackTable))
