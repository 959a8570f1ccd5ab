"""The project's tracker and roboflow's `ByteTrackTracker` on the same synthetic scenes, and both sets of metrics.

Each run gives, frame by frame, the ground truth {object number: box} and what the tracker reported as seen
in that frame {track id: box}: for edge_runtime the objects matched by a detection in the frame (a coasting
prediction is not a detection, and would be scored as a false positive wherever it drifted), for
`ByteTrackTracker` the detections it returned with a tracker id (it returns nothing else). Both report the
detection's own box, so the two are scored on the same footing.

How `ByteTrackTracker` is run, as its documentation asks for a camera: `frame_rate` set to the scene's
rate, and every frame's capture time passed as `timestamp` (its variable-rate mode, where tracks are
predicted over the real interval and a lost track expires after `lost_track_buffer / 30` seconds).
Detections scoring below 0.1 are left out, as ByteTrack's reference code does before its second stage
(`trackers` itself takes every detection below `high_conf_det_threshold` there) and as the project's
`scores.low` does. `ByteTrackTracker` ignores labels; `per_label` runs one tracker per label instead, as
Frigate does for its labels, so that a person and a car never share an id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import supervision as sv
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
