"""What the tracker reports after each frame: the objects present, and those that left.

Only confirmed real objects appear: a track that has not yet matched `confirm_hits` frames in a row, or
whose median score never reached its label's `threshold`, is kept inside the tracker and never shown,
so a subscriber counting objects or raising alarms sees no detector ghosts. An object that appeared
once is reported in every frame until it ends, including frames in which the detector missed it (its
box is then the tracker's prediction and `detection_index` is None), because it has not left yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["TrackUpdate", "TrackedObject"]


class TrackedObject(NamedTuple):
    """One object followed over time, as of the latest analysed frame (or its last one, once ended).

    Times are the capture timestamps given to the tracker, in seconds. A named tuple rather than a frozen
    dataclass because the tracker makes one per object per frame: a tuple is built in a third of the time.
    """

    id: str  # stable for the object's whole life: "<first capture time, 3 decimals>-<serial number>"
    label: str
    box: tuple[float, float, float, float]  # x_min, y_min, x_max, y_max in source pixels
    score: float  # the latest matched detection's score
    top_score: float  # the highest median score reached (Frigate's top_score)
    stationary: bool  # its box stayed in place for at least `stationary_after_s`
    hits: int  # analysed frames in which a detection matched it
    start_time: float  # capture time of its first detection
    last_seen: float  # capture time of its latest matched detection
    age_s: float  # seconds from its first detection to the frame reported
    detection_index: int | None  # position in this frame's detections of the one it matched; None if missed

    @property
    def seen(self) -> bool:
        """Whether the detector found it in this frame (else it is coasting on its prediction)."""
        return self.detection_index is not None


@dataclass(frozen=True)
class TrackUpdate:
    """The tracker's answer for one frame (or one `coast` call)."""

    timestamp: float
    objects: tuple[TrackedObject, ...]  # confirmed real objects present, oldest first
    ended: tuple[TrackedObject, ...]  # reported objects that left in this frame, as they were last seen
