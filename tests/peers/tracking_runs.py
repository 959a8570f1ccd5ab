"""The project's tracker and roboflow's `ByteTrackTracker` on the same synthetic scenes, and both sets of metrics.

Each run gives, frame by frame, the ground truth {object number: box} and what the tracker reported as seen
in that frame {track id: box}: for edge_runtime the objects matched by a detection in the frame (a coasting
prediction is not a detection, and would be scored as a false positive wherever it drifted), for
`ByteTrackTracker` the detections it returned with a tracker id (it returns nothing else). Both report the
detection's own box, so the two are scored on the same footing.

How `ByteTrackTracker` is run, as its documentation asks for a camera: `frame_rate` set to the scene's
rate, and every frame's capture time passed as `timestamp` (its variable-rate mode, where tracks are
predicted over the real interval and a lost track expires after `lost_track_buffer / 30` seconds).
Detections scoring 0.1 or less are left out, as ByteTrack's reference code does before its second stage
(`trackers` itself takes every detection below `high_conf_det_threshold` there); the project's
`scores.low` is 0.1 too. `ByteTrackTracker` ignores labels; `per_label` runs one tracker per label instead, as
Frigate does for its labels, so that a person and a car never share an id.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import supervision as sv
from mot_metrics import MotResult, evaluate
from synthetic_scenes import HEIGHT, WIDTH, Box, SceneSettings, scene
from trackers import ByteTrackTracker
from trackers.eval import (
    aggregate_clear_metrics,
    aggregate_identity_metrics,
    box_iou,
    compute_clear_metrics,
    compute_identity_metrics,
)

from edge_runtime.tracking import TrackConfig, Tracker

LOWEST_SCORE = 0.1  # ByteTrack's reference code drops detections at or below it; edge_runtime's scores.low
FRAME_RATES = (5, 10, 30)
TUNING = range(10)  # the seeds edge_runtime's tracker was tuned on, and ByteTrack's settings chosen on
ACCEPTANCE = range(200, 240)  # run by neither tracker before the goals of test_tracking_peers were written

Frames = list[tuple[dict[int, Box], dict[str, Box]]]


@dataclass(frozen=True)
class ByteTrackSettings:
    """`ByteTrackTracker`'s arguments other than `frame_rate`, and whether to run one tracker per label."""

    per_label: bool = False
    lost_track_buffer: int = 30
    track_activation_threshold: float = 0.7
    minimum_consecutive_frames: int = 2
    minimum_iou_threshold: float = 0.1
    high_conf_det_threshold: float = 0.6

    def arguments(self) -> dict[str, Any]:
        arguments = asdict(self)
        del arguments["per_label"]
        return arguments


# What `search()` chose on the tuning seeds: the highest IDF1, ties going to ByteTrack's defaults.
BYTETRACK_TUNED = {
    5: ByteTrackSettings(per_label=True, minimum_iou_threshold=0.05),
    10: ByteTrackSettings(
        per_label=True, lost_track_buffer=150, minimum_iou_threshold=0.3, minimum_consecutive_frames=3
    ),
    30: ByteTrackSettings(per_label=True, minimum_iou_threshold=0.3, minimum_consecutive_frames=3),
}
BYTETRACK_DEFAULTS = ByteTrackSettings(per_label=True)


def search() -> Iterator[ByteTrackSettings]:
    """The settings tried on the tuning seeds: ByteTrack's defaults and edge_runtime's matching values for
    the score thresholds (0.6/0.7 or `scores.high`/`scores.new_track` 0.5/0.6), the lost-track buffer (30
    frames of 30 fps = 1 s, or 150 = `lost_after_s` 5 s) and confirmation (2 frames = `confirm_hits`, or
    3), with the overlap threshold from 0.05 to 0.4 (its default 0.1); defaults first."""
    for lost, (high, activation), iou, frames in itertools.product(
        (30, 150), ((0.6, 0.7), (0.5, 0.6)), (0.1, 0.05, 0.2, 0.3, 0.4), (2, 3)
    ):
        yield ByteTrackSettings(
            per_label=True,
            lost_track_buffer=lost,
            high_conf_det_threshold=high,
            track_activation_threshold=activation,
            minimum_iou_threshold=iou,
            minimum_consecutive_frames=frames,
        )


@functools.cache
def acceptance_runs(fps: int, side: str) -> tuple[Frames, ...]:
    """Every acceptance scene at `fps` through "edge_runtime" or "bytetrack" (as tuned for the rate)."""
    if side == "edge_runtime":
        return tuple(ours(seed, fps) for seed in ACCEPTANCE)
    return tuple(bytetrack(seed, fps, BYTETRACK_TUNED[fps]) for seed in ACCEPTANCE)


def totals(sequences: tuple[Frames, ...] | list[Frames]) -> MotResult:
    """`mot_metrics` over several sequences: each scored alone, the counts summed."""
    summed: dict[str, int] = {}
    for frames in sequences:
        for name, value in vars(evaluate(frames)).items():
            summed[name] = summed.get(name, 0) + value
    return MotResult(**summed)


def ours(seed: int, fps: float, config: TrackConfig | None = None) -> Frames:
    """edge_runtime's tracker on one scene: the objects it reports as seen in each frame."""
    tracker = Tracker(config or TrackConfig())
    frames: Frames = []
    for frame in scene(seed, SceneSettings(fps=fps)):
        update = tracker.update(frame.detections, frame.timestamp, (WIDTH, HEIGHT))
        frames.append((frame.truth, {o.id: o.box for o in update.objects if o.seen}))
    return frames


def bytetrack(seed: int, fps: float, settings: ByteTrackSettings) -> Frames:
    """`ByteTrackTracker` on one scene: the detections it returned with a tracker id, in each frame."""
    trackers: dict[str, ByteTrackTracker] = {}
    frames: Frames = []
    for frame in scene(seed, SceneSettings(fps=fps)):
        kept = [d for d in frame.detections if d.score > LOWEST_SCORE]
        groups: dict[str, list[int]] = {}
        for index, detection in enumerate(kept):
            groups.setdefault(detection.label if settings.per_label else "", []).append(index)
        for group in trackers.keys() - groups.keys():
            groups[group] = []  # a tracker with nothing this frame still has to age its tracks
        reported: dict[str, Box] = {}
        for group, indices in groups.items():
            tracker = trackers.get(group)
            if tracker is None:
                tracker = trackers[group] = ByteTrackTracker(frame_rate=fps, **settings.arguments())
            detections = sv.Detections(
                xyxy=np.array([kept[i].box for i in indices], dtype=np.float64).reshape(-1, 4),
                confidence=np.array([kept[i].score for i in indices], dtype=np.float64),
            )
            result = tracker.update(detections, timestamp=frame.timestamp)
            for box, track in zip(result.xyxy.tolist(), result.tracker_id.tolist(), strict=True):
                if track >= 0:
                    reported[f"{group}-{track}"] = (box[0], box[1], box[2], box[3])
        frames.append((frame.truth, reported))
    return frames


def trackeval_metrics(sequences: list[Frames]) -> dict[str, Any]:
    """CLEAR and Identity metrics from `trackers.eval` (TrackEval's definitions), summed over the sequences as
    TrackEval combines them; IoU from `trackers.eval.box_iou`, threshold 0.5."""
    clear, identity = [], []
    for frames in sequences:
        names: dict[str, int] = {}
        truth_ids, hypothesis_ids, similarities = [], [], []
        for truth, hypothesis in frames:
            truth_ids.append(np.array(list(truth), dtype=np.int64))
            hypothesis_ids.append(np.array([names.setdefault(h, len(names)) for h in hypothesis], dtype=np.int64))
            similarities.append(box_iou(_boxes(truth), _boxes(hypothesis)))
        clear.append(compute_clear_metrics(truth_ids, hypothesis_ids, similarities))
        identity.append(compute_identity_metrics(truth_ids, hypothesis_ids, similarities))
    return aggregate_clear_metrics(clear) | aggregate_identity_metrics(identity)


def _boxes(boxes: Mapping[Any, Box]) -> np.ndarray:
    return np.array(list(boxes.values()), dtype=np.float64).reshape(-1, 4)
