"""ByteTrack's association with Frigate's judgement, on capture time instead of frame counts.

Each analysed frame goes through these steps (`Tracker.update`):

1. Every track's box is predicted to the frame's capture time (`kalman`).
2. Detections of untracked labels, inside a mask, of implausible size or shape, or scoring below
   `scores.low` are set aside (`filters`).
3. Detections scoring at least `scores.high` are matched against all tracks by overlap, weighed by score
   when `match.fuse_score` is on.
4. Weaker detections may then keep confirmed tracks still unmatched, by an overlap of at least 0.5: a
   person half hidden behind a parked car scores low but is still the same person. They never start one.
5. Confident detections still unmatched get a second chance against tracks still unmatched by Frigate's
   relative distance, which tolerates a box that moved further than its own size (at 5 fps an object can
   jump past its prediction), but only where the filter finds the jump plausible (a 95 % Mahalanobis
   gate): a steady walker missed for a frame is not two widths away, where a swaying bush may fire.
6. Unmatched confident detections scoring at least `scores.new_track` start tentative tracks. A
   tentative track missed once is dropped; one matched `confirm_hits` frames in a row is confirmed.

Labels never match each other, whatever their overlap, so objects of different labels never swap ids.

Time is capture time. A track ends once `lost_after_s` passed since the first analysed frame that missed
it, not since its last match. So the caller simply does not call `update` for frames the motion gate held
back (the scene did not change): what was there in the last analysed frame is assumed to be there still
(Frigate: "if the object was there in the last frame, assume it's still there"), and a parked car keeps
its id through ten minutes without an analysed frame. A caller that knows frames went by unanalysed may
say so with `coast`, so that tracks already missing end on time rather than at the next analysed frame.
A box is extrapolated by at most `MAX_EXTRAPOLATION_S`: a constant velocity is a fair guess for a second;
a longer gap means a still scene or a stalled stream, where the last position is the better guess.

Stationary: a track keeps the box where it last stopped (its anchor); a matched detection overlapping
the anchor by less than `STILL_IOU` means it moved, and the anchor moves there. A track is stationary
once its anchor has not moved for `stationary_after_s`. 0.6 is Frigate's overlap for "moved to a new
position": a detector's box jitter (a few per cent of the size) stays well above it, while an object
that walked a third of its width away falls below it. Comparing with where it stopped, rather than with
the previous frame, catches a slow creep that no single frame shows.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt

from edge_runtime.tracking.association import (
    FORBIDDEN,
    any_within_relative_distance,
    assign,
    iou_matrix,
    paired_iou,
    relative_distance_matrix,
)
from edge_runtime.tracking.config import TrackConfig
from edge_runtime.tracking.filters import DetectionFilter
from edge_runtime.tracking.kalman import GATE_95, ConstantVelocityFilter, boxes_from_states, measurements_from_boxes
from edge_runtime.tracking.label_rules import LabelRules
from edge_runtime.tracking.objects import TrackedObject, TrackUpdate
from edge_runtime.tracking.reports import Reporter
from edge_runtime.tracking.tracks import HISTORY_LENGTH, TrackTable, blockwise, median_scores, take_rows

if TYPE_CHECKING:  # the decoders package imports OpenCV, which the tracker does not need
    from edge_runtime.decoders.decoded import Detection

__all__ = ["LOW_SCORE_MIN_IOU", "MAX_EXTRAPOLATION_S", "STILL_IOU", "Tracker"]

Array = npt.NDArray[np.float64]
Indices = npt.NDArray[np.intp]
Codes = npt.NDArray[np.int64]

LOW_SCORE_MIN_IOU = 0.5  # ByteTrack's second stage: a weak detection must overlap a track well to keep it
MAX_EXTRAPOLATION_S = 1.0
STILL_IOU = 0.6
# Up to this many track-detection pairs, anchors share the association's overlap matrix (see `_associate`).
STACKED_OVERLAP_PAIRS = 1024
# Up to this many pairs left for the second chance, whether any is near is asked in Python, not numpy.
FEW_DISTANCE_PAIRS = 32


class Tracker:
    """Follows the objects of one camera. Not thread-safe: one pipeline's post thread calls it.

    A frame's work is a fixed number of numpy operations on arrays of a few rows, so what it costs is
    mostly the number of operations, not their size: each step is skipped when it has nothing to do (no
    tracks, no weak detections, nothing missed, nothing new), and the settings are read once, here, rather
    than looked up on the config in every frame.
    """

    def __init__(self, config: TrackConfig, motion: ConstantVelocityFilter | None = None) -> None:
        self.config = config
        self.motion = motion or ConstantVelocityFilter()
        self.detection_filter = DetectionFilter(config)
        self._tracks = TrackTable.empty()
        self._label_rules = LabelRules(self.detection_filter)
        self._reporter = Reporter(config.confirm_hits, config.stationary_after_s)
        self._serials = itertools.count(1)
        self._time: float | None = None
        self._confirm_hits = config.confirm_hits
        self._lost_after_s = config.lost_after_s
        self._high, self._new_track = config.scores.high, config.scores.new_track
        self._fuse_score, self._iou_limit = config.match.fuse_score, 1.0 - config.match.iou
        self._relative_distance = config.match.relative_distance

    def __len__(self) -> int:
        """Live tracks, tentative and unreported ones included."""
        return len(self._tracks)

    def update(self, detections: Sequence[Detection], timestamp: float, frame_size: tuple[int, int]) -> TrackUpdate:
        """Take one analysed frame's detections, captured at `timestamp` (seconds), on a frame of
        `frame_size` (width, height) pixels. A timestamp earlier than the previous one counts as equal."""
        now = self._advance(timestamp, extrapolate=True)
        self._reporter.expect(len(detections))
        indices, boxes, scores, codes = self._admitted(detections, frame_size)
        matches, unmatched, predicted, anchor_overlap = self._associate(boxes, scores, codes)
        all_matched, shown_boxes = self._apply(matches, predicted, anchor_overlap, boxes, scores, codes, now)

        tracks = self._tracks
        ended: tuple[TrackedObject, ...] = ()
        if not all_matched:
            tentative = tracks.hits < self._confirm_hits
            # A tentative track missed once is dropped; a confirmed one once missing for lost_after_s (matched
            # tracks' missed_since is NaN, which fmin passes over and which compares False). Most frames have
            # neither, and are done after two comparisons.
            dropped = (matches < 0) & tentative if np.count_nonzero(tentative) else None
            if now - np.fmin.reduce(tracks.missed_since) >= self._lost_after_s:
                lost = now - tracks.missed_since >= self._lost_after_s
                dropped = lost if dropped is None else dropped | lost
            if dropped is not None and np.count_nonzero(dropped):
                gone = dropped & ~tentative
                if np.count_nonzero(gone):
                    ended = self._reporter.objects(tracks.select(gone), now, None)
                keep = ~dropped
                tracks = tracks.select(keep)
                matches = matches[keep]
                if shown_boxes is not None:
                    shown_boxes = take_rows(shown_boxes, keep.nonzero()[0])

        if len(unmatched):  # confident detections left unmatched start tracks when confident enough for that
            starting = unmatched[scores[unmatched] >= self._new_track]
            if len(starting):
                started = take_rows(boxes, starting)
                tracks = tracks.extend(self._start(started, scores[starting], codes[starting], now))
                matches = np.concatenate([matches, starting])
                if shown_boxes is not None:
                    shown_boxes = np.concatenate([shown_boxes, started])
        self._tracks = tracks
        # Each track's position in `detections`, or -1; where every detection was admitted, `matches` is that.
        # Otherwise the row -1 (missed) picks the -1 appended.
        detection_indices = matches if indices is None else np.concatenate([indices, _NOT_FOUND])[matches]
        return TrackUpdate(now, self._reporter.objects(tracks, now, detection_indices, shown_boxes), ended)

    def coast(self, timestamp: float) -> TrackUpdate:
        """Frames up to `timestamp` went by without analysis because the scene did not change: objects
        present in the last analysed frame stay where they were, and tracks already missing age, so an
        object that left before the scene went still ends on time."""
        now = self._advance(timestamp, extrapolate=False)
        tracks = self._tracks
        confirmed = tracks.hits >= self._confirm_hits
        gone = confirmed & (now - tracks.missed_since >= self._lost_after_s)  # NaN compares False
        if not np.count_nonzero(gone):
            return TrackUpdate(now, self._reporter.objects(tracks, now, np.full(len(tracks), -1)), ())
        ended = self._reporter.objects(tracks.select(gone), now, None)
        self._tracks = tracks.select(~gone)
        return TrackUpdate(now, self._reporter.objects(self._tracks, now, np.full(len(self._tracks), -1)), ended)

    def _advance(self, timestamp: float, extrapolate: bool) -> float:
        """Move the tracker's clock to `timestamp`, predicting every box there when `extrapolate`."""
        previous = self._time
        now = timestamp if previous is None else max(timestamp, previous)
        if previous is not None and extrapolate:
            step = min(now - previous, MAX_EXTRAPOLATION_S)
            tracks = self._tracks
            tracks.spreads = self.motion.predict_in_place(tracks.means, tracks.spreads, step)
        self._time = now
        return now

    def _admitted(
        self, detections: Sequence[Detection], frame_size: tuple[int, int]
    ) -> tuple[Indices | None, Array, Array, Codes]:
        """The detections the filters let through: their positions in `detections` (None: all of them, in
        order), boxes, scores, labels."""
        if not detections:
            return None, _NO_BOXES, _NO_SCORES, _NO_CODES
        # One flat pass over the coordinates (np.array on a list of tuples takes twice as long), and attribute
        # getters mapped in C rather than comprehensions.
        count = len(detections)
        corners = np.fromiter(itertools.chain.from_iterable(map(_box, detections)), np.float64, 4 * count)
        boxes = np.asfortranarray(corners.reshape(-1, 4))  # column-major, as the track table (`tracks`)
        scores = np.fromiter(map(_score, detections), np.float64, count)
        labels = list(map(_label, detections))
        admitted = self.detection_filter.admit(labels, boxes, scores, frame_size)
        indices = None
        if np.count_nonzero(admitted) < count:  # usually every detection passes, and nothing needs copying
            indices = admitted.nonzero()[0]
            labels = [labels[i] for i in indices.tolist()]
            boxes, scores = take_rows(boxes, indices), scores[indices]
        return indices, boxes, scores, self._label_rules.codes(labels)

    def _associate(self, boxes: Array, scores: Array, codes: Codes) -> _Association:
        """Steps 3 to 5 above."""
        tracks = self._tracks
        count = len(tracks)
        matches = _ALL_MISSED[:count].copy() if count <= len(_ALL_MISSED) else np.full(count, -1, dtype=np.intp)
        confident = scores >= self._high
        if count == 0 or len(boxes) == 0:
            return _Association(matches, confident.nonzero()[0], None, None)
        predicted = boxes_from_states(tracks.means)
        anchor_overlap = None
        if count * len(boxes) <= STACKED_OVERLAP_PAIRS:
            # Anchors below the predicted boxes: one overlap matrix twice as tall costs less than a second
            # computation, while the matrices are small enough that the number of numpy calls is what counts.
            both = iou_matrix(np.concatenate([predicted, tracks.anchors]), boxes)
            overlap, anchor_overlap = both[:count], both[count:]
        else:
            overlap = iou_matrix(predicted, boxes)
        track_codes = tracks.label_codes
        confident_count = np.count_nonzero(confident)
        all_confident = confident_count == len(confident)

        taken = _NO_INDICES  # the confident detections matched
        if confident_count:
            similarity = overlap * scores if self._fuse_score else overlap
            # A weak detection's code -1 matches no track's label: one comparison forbids both.
            forbidden = track_codes[:, None] != (codes if all_confident else np.where(confident, codes, -1))
            first = assign(np.where(forbidden, FORBIDDEN, 1.0 - similarity), self._iou_limit)
            matches[first.rows] = first.columns
            taken = first.columns
        matched_count = len(taken)

        # Only weak detections that overlap some track well enough can be paired, and only while a track is
        # unmatched: usually none does. A column's best overlap passes the limit exactly when one of its
        # overlaps does.
        if not all_confident and matched_count < count:
            weak = ~confident
            weak &= 1.0 - np.maximum.reduce(overlap, axis=0) <= 1.0 - LOW_SCORE_MIN_IOU
            if np.count_nonzero(weak):
                open_rows = ((matches < 0) & (tracks.hits >= self._confirm_hits)).nonzero()[0]
                if len(open_rows):
                    weak_columns = weak.nonzero()[0]
                    pairs = open_rows[:, None], weak_columns  # as np.ix_, without its Python overhead
                    different = track_codes[open_rows, None] != codes[weak_columns]
                    cost = np.where(different, FORBIDDEN, 1.0 - overlap[pairs])
                    second = assign(cost, 1.0 - LOW_SCORE_MIN_IOU)
                    matches[open_rows[second.rows]] = weak_columns[second.columns]
                    matched_count += len(second.rows)

        if len(taken) == confident_count:  # every confident detection matched: nothing waits, nothing starts
            return _Association(matches, _NO_INDICES, predicted, anchor_overlap)
        waiting = confident.copy()
        waiting[taken] = False  # the weak stage takes no confident detection
        waiting_columns = waiting.nonzero()[0]
        if self._relative_distance <= 0 or matched_count == count:
            return _Association(matches, waiting_columns, predicted, anchor_overlap)
        open_rows = (matches < 0).nonzero()[0]
        estimates, waiting_boxes = predicted[open_rows], boxes[waiting_columns]
        if len(open_rows) * len(waiting_columns) <= FEW_DISTANCE_PAIRS and not any_within_relative_distance(
            estimates, waiting_boxes, self._relative_distance
        ):
            return _Association(matches, waiting_columns, predicted, anchor_overlap)  # usual: no pair near enough
        distance = relative_distance_matrix(estimates, waiting_boxes)
        if not np.count_nonzero(distance <= self._relative_distance):
            return _Association(matches, waiting_columns, predicted, anchor_overlap)
        means, spreads = tracks.means[open_rows], tracks.spreads[open_rows]
        plausible = self.motion.gating_distance(means, spreads, waiting_boxes) <= GATE_95
        allowed = plausible & (track_codes[open_rows, None] == codes[waiting_columns])
        third = assign(np.where(allowed, distance, FORBIDDEN), self._relative_distance)
        matches[open_rows[third.rows]] = waiting_columns[third.columns]
        if len(third.rows):
            waiting[waiting_columns[third.columns]] = False
            waiting_columns = waiting.nonzero()[0]
        return _Association(matches, waiting_columns, predicted, anchor_overlap)

    def _apply(
        self,
        matches: Indices,
        predicted: Array | None,
        anchor_overlap: Array | None,
        boxes: Array,
        scores: Array,
        codes: Codes,
        now: float,
    ) -> tuple[bool, Array | None]:
        """Correct the matched tracks with their detections, record every track's score for the frame, and
        mark since when each missed track is missing. Whether every track matched, and each track's box to
        report: its detection's, or where it was `predicted` when missed (None without a prediction)."""
        tracks = self._tracks
        if len(tracks) == 0:
            return True, None
        history = tracks.history
        history[:, :-1] = history[:, 1:]
        counted = history[:, -1]  # 0 for a miss, and for a match scoring below its label's min_score
        seen = matches >= 0
        matched_count = np.count_nonzero(seen)
        if matched_count == len(tracks):  # every track matched: each column updates in place
            found, found_scores = take_rows(boxes, matches), scores[matches]
            self.motion.update_in_place(tracks.means, tracks.spreads, measurements_from_boxes(found))
            tracks.hits += 1
            tracks.last_seen.fill(now)
            tracks.missed_since.fill(np.nan)
            tracks.last_boxes, tracks.last_scores = found, found_scores  # fresh arrays, owned by the table from now
            if anchor_overlap is None:
                moved = (paired_iou(found, tracks.anchors) < STILL_IOU).nonzero()[0]
            else:  # the same numbers, computed with the association's overlaps
                moved = (anchor_overlap[_rows(len(matches)), matches] < STILL_IOU).nonzero()[0]
            counted[:] = np.where(found_scores >= self._label_rules.min_score_of(codes, matches), found_scores, 0.0)
            shown_boxes: Array | None = found
        else:
            shown_boxes = predicted  # its missed rows are the prediction, as the filter leaves their states
            np.fmin(tracks.missed_since, now, out=tracks.missed_since)  # NaN (not missing) gives now
            moved = _NO_INDICES
            if matched_count:
                # Every column at once, the missed rows masked out, rather than gathering the matched rows and
                # scattering them back: a missed track's row (-1) reads the last detection, and is never used.
                found, found_scores = take_rows(boxes, matches), scores[matches]
                self.motion.update_in_place(tracks.means, tracks.spreads, measurements_from_boxes(found), seen)
                tracks.hits += seen
                np.copyto(tracks.last_seen, now, where=seen)
                np.copyto(tracks.missed_since, np.nan, where=seen)
                rows_seen = seen[:, None]
                np.copyto(tracks.last_boxes, found, where=rows_seen)
                np.copyto(tracks.last_scores, found_scores, where=seen)
                if shown_boxes is not None:
                    np.copyto(shown_boxes, found, where=rows_seen)
                if anchor_overlap is None:
                    overlaps = paired_iou(found, tracks.anchors)
                else:
                    overlaps = anchor_overlap[_rows(len(matches)), matches]
                moved = ((overlaps < STILL_IOU) & seen).nonzero()[0]
                counted[:] = np.where(
                    seen & (found_scores >= self._label_rules.min_score_of(codes, matches)), found_scores, 0.0
                )
            else:
                counted[:] = 0.0
        if len(moved):  # rows of tracks and of `found` alike
            tracks.anchors[moved] = found[moved]
            tracks.still_since[moved] = now
        medians = median_scores(history)
        np.maximum(tracks.top_scores, medians, out=tracks.top_scores)
        tracks.real |= medians >= self._label_rules.threshold_of(tracks.label_codes)
        return matched_count == len(tracks), shown_boxes

    def _start(self, boxes: Array, scores: Array, codes: Codes, now: float) -> TrackTable:
        """Tentative tracks for the given detections, with one hit and one score each."""
        count = len(boxes)
        means, spreads = self.motion.initiate(boxes)
        history = np.full((count, HISTORY_LENGTH), np.nan, order="F")
        history[:, -1] = np.where(scores >= self._label_rules.min_score_of(codes, slice(None)), scores, 0.0)
        medians = median_scores(history)
        serials = list(itertools.islice(self._serials, count))
        return TrackTable(
            means=means,
            spreads=blockwise(spreads),  # the filter's own layout (column-major) to the table's
            label_codes=codes,
            labels=self._label_rules.names(codes),
            hits=np.ones(count, dtype=np.int64),
            start_times=np.full(count, now),
            last_seen=np.full(count, now),
            missed_since=np.full(count, np.nan),
            still_since=np.full(count, now),
            anchors=boxes.copy(order="F"),
            last_boxes=boxes.copy(order="F"),
            last_scores=scores.copy(),
            history=history,
            top_scores=medians,
            real=medians >= self._label_rules.threshold_of(codes),
            serials=np.array(serials, dtype=np.int64),
            ids=np.array([f"{now:.3f}-{serial}" for serial in serials], dtype=object),
        )


_box, _score, _label = operator.attrgetter("box"), operator.attrgetter("score"), operator.attrgetter("label")
_NOT_FOUND = np.full(1, -1, dtype=np.intp)
_NO_INDICES = np.zeros(0, dtype=np.intp)
_ROWS = np.arange(1024, dtype=np.intp)
_ALL_MISSED = np.full(1024, -1, dtype=np.intp)


def _rows(count: int) -> Indices:
    """0 to `count` - 1: a view of one array made once, for the frame sizes that most cameras have."""
    return _ROWS[:count] if count <= len(_ROWS) else np.arange(count)


class _Association(NamedTuple):
    """What `Tracker._associate` found."""

    matches: Indices  # for each track, the row of the detection it matched, or -1
    unmatched: Indices  # the confident detections left unmatched, which may start tracks
    predicted: Array | None  # each track's predicted box (None when there was nothing to match)
    anchor_overlap: Array | None  # on a small frame, each track's anchor's overlap with each detection


_NO_BOXES = np.zeros((0, 4))
_NO_SCORES = np.zeros(0)
_NO_CODES = np.zeros(0, dtype=np.int64)
