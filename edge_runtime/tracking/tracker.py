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
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from edge_runtime.tracking.association import (
    FORBIDDEN,
    assign,
    iou_matrix,
    paired_iou,
    relative_distance_matrix,
)
from edge_runtime.tracking.config import TrackConfig
from edge_runtime.tracking.filters import DetectionFilter
from edge_runtime.tracking.kalman import GATE_95, ConstantVelocityFilter, boxes_from_states
from edge_runtime.tracking.objects import TrackedObject, TrackUpdate
from edge_runtime.tracking.tracks import HISTORY_LENGTH, TrackTable, median_scores

if TYPE_CHECKING:  # the decoders package imports OpenCV, which the tracker does not need
    from edge_runtime.decoders.decoded import Detection

__all__ = ["LOW_SCORE_MIN_IOU", "MAX_EXTRAPOLATION_S", "STILL_IOU", "Tracker"]

Array = npt.NDArray[np.float64]
Indices = npt.NDArray[np.intp]
Codes = npt.NDArray[np.int64]

LOW_SCORE_MIN_IOU = 0.5  # ByteTrack's second stage: a weak detection must overlap a track well to keep it
MAX_EXTRAPOLATION_S = 1.0
STILL_IOU = 0.6


class Tracker:
    """Follows the objects of one camera. Not thread-safe: one pipeline's post thread calls it."""

    def __init__(self, config: TrackConfig, motion: ConstantVelocityFilter | None = None) -> None:
        self.config = config
        self.motion = motion or ConstantVelocityFilter()
        self.detection_filter = DetectionFilter(config)
        self._tracks = TrackTable.empty()
        self._labels: list[str] = []  # label code -> label
        self._label_codes: dict[str, int] = {}
        self._thresholds = np.zeros(0)  # per label code
        self._min_scores = np.zeros(0)  # per label code
        self._serials = itertools.count(1)
        self._time: float | None = None

    def __len__(self) -> int:
        """Live tracks, tentative and unreported ones included."""
        return len(self._tracks)

    def update(self, detections: Sequence[Detection], timestamp: float, frame_size: tuple[int, int]) -> TrackUpdate:
        """Take one analysed frame's detections, captured at `timestamp` (seconds), on a frame of
        `frame_size` (width, height) pixels. A timestamp earlier than the previous one counts as equal."""
        now = self._advance(timestamp, extrapolate=True)
        indices, boxes, scores, codes = self._admitted(detections, frame_size)
        matches = self._associate(boxes, scores, codes)
        self._apply(matches, boxes, scores, codes, now)

        tracks = self._tracks
        confirmed = tracks.hits >= self.config.confirm_hits
        missed = matches < 0
        tracks.missed_since[missed] = np.fmin(tracks.missed_since[missed], now)  # NaN (not missing) gives now
        gone = missed & confirmed & (now - tracks.missed_since >= self.config.lost_after_s)
        ended = self._report(tracks.select(gone), now, None) if gone.any() else ()
        keep = ~gone & ~(missed & ~confirmed)  # a tentative track missed once is dropped
        if not keep.all():
            tracks = tracks.select(keep)

        taken = np.zeros(len(boxes), dtype=bool)
        taken[matches[~missed]] = True
        starting = np.flatnonzero(~taken & (scores >= self.config.scores.new_track))
        if len(starting):
            tracks = tracks.extend(self._start(boxes[starting], scores[starting], codes[starting], now))
        self._tracks = tracks
        rows = np.concatenate([matches[keep], starting])  # each track's detection row in this frame, or -1
        detection_indices = np.where(rows >= 0, indices[np.maximum(rows, 0)], -1) if len(indices) else rows
        return TrackUpdate(now, self._report(tracks, now, detection_indices), ended)

    def coast(self, timestamp: float) -> TrackUpdate:
        """Frames up to `timestamp` went by without analysis because the scene did not change: objects
        present in the last analysed frame stay where they were, and tracks already missing age, so an
        object that left before the scene went still ends on time."""
        now = self._advance(timestamp, extrapolate=False)
        tracks = self._tracks
        confirmed = tracks.hits >= self.config.confirm_hits
        gone = confirmed & (now - tracks.missed_since >= self.config.lost_after_s)  # NaN compares False
        if not gone.any():
            return TrackUpdate(now, self._report(tracks, now, np.full(len(tracks), -1)), ())
        ended = self._report(tracks.select(gone), now, None)
        self._tracks = tracks.select(~gone)
        return TrackUpdate(now, self._report(self._tracks, now, np.full(len(self._tracks), -1)), ended)

    def _advance(self, timestamp: float, extrapolate: bool) -> float:
        """Move the tracker's clock to `timestamp`, predicting every box there when `extrapolate`."""
        previous = self._time
        now = timestamp if previous is None else max(timestamp, previous)
        if previous is not None and extrapolate:
            step = min(now - previous, MAX_EXTRAPOLATION_S)
            tracks = self._tracks
            tracks.means, tracks.spreads = self.motion.predict(tracks.means, tracks.spreads, step)
        self._time = now
        return now

    def _admitted(
        self, detections: Sequence[Detection], frame_size: tuple[int, int]
    ) -> tuple[Indices, Array, Array, Codes]:
        """The detections the filters let through: their positions in `detections`, boxes, scores, labels."""
        boxes = np.array([d.box for d in detections], dtype=np.float64).reshape(-1, 4)
        scores = np.array([d.score for d in detections], dtype=np.float64)
        labels = [d.label for d in detections]
        indices = np.flatnonzero(self.detection_filter.admit(labels, boxes, scores, frame_size))
        codes = np.array([self._code(labels[i]) for i in indices], dtype=np.int64)
        return indices, boxes[indices], scores[indices], codes

    def _associate(self, boxes: Array, scores: Array, codes: Codes) -> Indices:
        """For each track, the row of the detection it matched, or -1 (steps 3 to 5 above)."""
        tracks = self._tracks
        matches = np.full(len(tracks), -1, dtype=np.intp)
        if len(tracks) == 0 or len(boxes) == 0:
            return matches
        predicted = boxes_from_states(tracks.means)
        overlap = iou_matrix(predicted, boxes)
        different = tracks.label_codes[:, None] != codes[None, :]
        confident = scores >= self.config.scores.high
        match = self.config.match

        if confident.any():
            similarity = overlap * scores[None, :] if match.fuse_score else overlap
            cost = np.where(different | ~confident[None, :], FORBIDDEN, 1.0 - similarity)
            first = assign(cost, 1.0 - match.iou)
            matches[first.rows] = first.columns

        open_rows = np.flatnonzero((matches < 0) & (tracks.hits >= self.config.confirm_hits))
        weak_columns = np.flatnonzero(~confident)
        if len(open_rows) and len(weak_columns):
            pairs = np.ix_(open_rows, weak_columns)
            second = assign(np.where(different[pairs], FORBIDDEN, 1.0 - overlap[pairs]), 1.0 - LOW_SCORE_MIN_IOU)
            matches[open_rows[second.rows]] = weak_columns[second.columns]

        waiting = confident.copy()
        waiting[matches[matches >= 0]] = False
        open_rows, waiting_columns = np.flatnonzero(matches < 0), np.flatnonzero(waiting)
        if match.relative_distance > 0 and len(open_rows) and len(waiting_columns):
            means, spreads = tracks.means[open_rows], tracks.spreads[open_rows]
            plausible = self.motion.gating_distance(means, spreads, boxes[waiting_columns]) <= GATE_95
            allowed = plausible & ~different[np.ix_(open_rows, waiting_columns)]
            distance = relative_distance_matrix(predicted[open_rows], boxes[waiting_columns])
            third = assign(np.where(allowed, distance, FORBIDDEN), match.relative_distance)
            matches[open_rows[third.rows]] = waiting_columns[third.columns]
        return matches

    def _apply(self, matches: Indices, boxes: Array, scores: Array, codes: Codes, now: float) -> None:
        """Correct the matched tracks with their detections, and record every track's score for the frame."""
        tracks = self._tracks
        matched = np.flatnonzero(matches >= 0)
        rows = matches[matched]
        found = boxes[rows]
        tracks.means[matched], tracks.spreads[matched] = self.motion.update(
            tracks.means[matched], tracks.spreads[matched], found
        )
        tracks.hits[matched] += 1
        tracks.last_seen[matched] = now
        tracks.missed_since[matched] = np.nan
        tracks.last_boxes[matched] = found
        tracks.last_scores[matched] = scores[rows]
        moved = matched[paired_iou(found, tracks.anchors[matched]) < STILL_IOU]
        tracks.anchors[moved] = boxes[matches[moved]]
        tracks.still_since[moved] = now
        counted = np.zeros(len(tracks))  # 0 for a miss, and for a match scoring below its label's min_score
        counted[matched] = np.where(scores[rows] >= self._min_scores[codes[rows]], scores[rows], 0.0)
        history = tracks.history
        history[:, :-1] = history[:, 1:]
        history[:, -1] = counted
        medians = median_scores(history)
        np.maximum(tracks.top_scores, medians, out=tracks.top_scores)
        tracks.real |= medians >= self._thresholds[tracks.label_codes]

    def _start(self, boxes: Array, scores: Array, codes: Codes, now: float) -> TrackTable:
        """Tentative tracks for the given detections, with one hit and one score each."""
        count = len(boxes)
        means, spreads = self.motion.initiate(boxes)
        history = np.full((count, HISTORY_LENGTH), np.nan)
        history[:, -1] = np.where(scores >= self._min_scores[codes], scores, 0.0)
        medians = median_scores(history)
        return TrackTable(
            means=means,
            spreads=spreads,
            label_codes=codes,
            hits=np.ones(count, dtype=np.int64),
            start_times=np.full(count, now),
            last_seen=np.full(count, now),
            missed_since=np.full(count, np.nan),
            still_since=np.full(count, now),
            anchors=boxes.copy(),
            last_boxes=boxes.copy(),
            last_scores=scores.copy(),
            history=history,
            top_scores=medians,
            real=medians >= self._thresholds[codes],
            serials=np.fromiter(itertools.islice(self._serials, count), np.int64, count),
        )

    def _code(self, label: str) -> int:
        """The label's number, given on first sight, with its filter's thresholds cached by number."""
        code = self._label_codes.get(label)
        if code is None:
            code = self._label_codes[label] = len(self._labels)
            self._labels.append(label)
            rule = self.detection_filter.filter_for(label)
            self._thresholds = np.append(self._thresholds, rule.threshold)
            self._min_scores = np.append(self._min_scores, rule.min_score)
        return code

    def _report(self, tracks: TrackTable, now: float, detection_indices: Indices | None) -> tuple[TrackedObject, ...]:
        """The confirmed real objects among `tracks`: present ones with their index in this frame's
        detections (-1: missed, box predicted), or ended ones (None) as they were last seen."""
        shown = np.flatnonzero((tracks.hits >= self.config.confirm_hits) & tracks.real)
        if len(shown) == 0:
            return ()
        if detection_indices is None:
            indices = np.full(len(shown), -1)
            boxes = tracks.last_boxes[shown]
        else:
            indices = detection_indices[shown]
            predicted = boxes_from_states(tracks.means[shown])
            boxes = np.where((indices >= 0)[:, None], tracks.last_boxes[shown], predicted)
        stationary = now - tracks.still_since[shown] >= self.config.stationary_after_s
        columns = zip(
            tracks.start_times[shown].tolist(),
            tracks.serials[shown].tolist(),
            tracks.label_codes[shown].tolist(),
            boxes.tolist(),
            tracks.last_scores[shown].tolist(),
            tracks.top_scores[shown].tolist(),
            stationary.tolist(),
            tracks.hits[shown].tolist(),
            tracks.last_seen[shown].tolist(),
            indices.tolist(),
            strict=True,
        )
        labels = self._labels
        return tuple(
            TrackedObject(
                f"{start:.3f}-{serial}",
                labels[code],
                (box[0], box[1], box[2], box[3]),
                score,
                top,
                still,
                hits,
                start,
                seen,
                now - start,
                index if index >= 0 else None,
            )
            for start, serial, code, box, score, top, still, hits, seen, index in columns
        )
