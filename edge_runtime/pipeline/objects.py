"""The objects stage of a camera pipeline: detections become objects with stable ids, frame after frame.

A pipeline with a `track:` section runs this stage on its post thread, after decoding and before the
result is filtered for publishing. The tracker sees every detection of the frame, also those below
`publish.min_score`: ByteTrack's second stage keeps a half-hidden object's track alive on its weak
detections. Each detection that is a confirmed object is marked with the object's id and whether it is
stationary; a detection of a track not yet confirmed is left unmarked, so an id in a result always
names an object the tracker judged real (see `edge_runtime.tracking.objects`).

Each frame's `TrackUpdate` then goes to the stage's listeners, in order, on the post thread, with the
frame and its marked detections. That is where whatever follows objects over time plugs in (zones,
lines, events: `object_outputs`): one more listener, and the pipeline itself does not change. A pipeline
with a `cascade:` section runs it here too, between the marking and the listeners (see `cascade`), so that
events already carry what the second models found on the frame's objects. A listener
that also has `start` and `stop` (`LifecycleListener`) is told when the pipeline starts, before any
frame, and when it stops, after the last, on the post thread: where open events end. A stage given
`zones_of` marks each object's detection with the zones it is in once the listeners have placed it.

Frames the motion gate holds back never reach the pipeline. An object present in the last analysed
frame does not age meanwhile: the tracker counts an absence from the first analysed frame that missed
the object, so a parked car keeps its id however long the scene stays still. An object that was already
missing when the scene went still has to end on time all the same, with no analysed frame to end it.
So while the pipeline has nothing to post it calls `idle` with the source's latest held frame, and once
that frame is `STILL_BEFORE_COAST_S` newer than the last analysed one, the stage coasts the tracker to
its capture time: missing objects age and end, present ones stay where they were. The short wait keeps
a gate that holds a frame or two between moving frames from cutting the tracker's prediction short.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from edge_runtime.decoders.decoded import Detection, Detections
from edge_runtime.pipeline.cascade import Cascade
from edge_runtime.sources.base import Frame
from edge_runtime.tracking import TrackConfig, Tracker, TrackUpdate

log = logging.getLogger(__name__)

__all__ = [
    "STILL_BEFORE_COAST_S",
    "LifecycleListener",
    "ObjectListener",
    "ObjectStage",
    "ObjectsSeen",
    "ZonesOf",
    "object_stage_for",
]

STILL_BEFORE_COAST_S = 0.5


@dataclass(frozen=True)
class ObjectsSeen:
    """What the stage hands its listeners after each analysed frame, and after each coast."""

    update: TrackUpdate
    frame: Frame | None  # the analysed frame; None when the update covers frames held back unanalysed
    detections: tuple[Detection, ...]  # the frame's detections, marked, before any publishing filter; () if held


ObjectListener = Callable[[ObjectsSeen], None]
ZonesOf = Callable[[str], tuple[str, ...] | None]  # an object's zones now by its id; None: not known


@runtime_checkable
class LifecycleListener(Protocol):
    """A listener that also wants to know when the pipeline starts and stops."""

    def __call__(self, seen: ObjectsSeen) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class ObjectStage:
    """One camera's tracker and what listens to it. Not thread-safe: the pipeline's post thread calls it."""

    def __init__(
        self,
        config: TrackConfig,
        listeners: Sequence[ObjectListener] = (),
        on_error: Callable[[], None] | None = None,
        zones_of: ZonesOf | None = None,
        cascade: Cascade | None = None,
    ) -> None:
        self.tracker = Tracker(config)
        self.cascade = cascade
        self.listeners = tuple(listeners)
        self._on_error = on_error or (lambda: None)
        self._zones_of = zones_of
        self._last_analysed: float | None = None  # the tracker's time after the latest analysed frame
        self._coasted_to: float | None = None

    def on_frame(self, frame: Frame, decoded: Detections) -> Detections:
        """Track the frame's detections; the same detections, those that are confirmed objects marked."""
        height, width = frame.image.shape[:2]
        update = self.tracker.update(decoded.detections, frame.captured_at, (int(width), int(height)))
        self._last_analysed = update.timestamp
        marked = _marked(decoded, update)
        if self.cascade is not None:
            marked = self.cascade.on_frame(frame, marked, update)
        self._tell(ObjectsSeen(update, frame, marked.detections))
        return marked if self._zones_of is None else _placed(marked, update, self._zones_of)

    def start(self) -> None:
        """The pipeline starts: listeners that keep state outside the process put their first values."""
        self._each_lifecycle("start")

    def stop(self) -> None:
        """The pipeline stopped after its last frame: listeners close what they hold open."""
        self._each_lifecycle("stop")

    def _each_lifecycle(self, step: str) -> None:
        for listener in self.listeners:
            if not isinstance(listener, LifecycleListener):
                continue
            try:
                getattr(listener, step)()
            except Exception:
                log.exception("objects: %s of listener %s failed", step, type(listener).__name__)
                self._on_error()

    def idle(self, held_at: float | None) -> TrackUpdate | None:
        """No frame came to be analysed for a while; `held_at` is the capture time of the newest frame the
        source held back (None: none). Coasts the tracker to it once the scene has been still for
        `STILL_BEFORE_COAST_S` since the last analysed frame; returns the update, or None if it did not."""
        last = self._last_analysed
        if held_at is None or last is None or held_at - last < STILL_BEFORE_COAST_S:
            return None
        if self._coasted_to is not None and held_at <= self._coasted_to:
            return None
        self._coasted_to = held_at
        update = self.tracker.coast(held_at)
        if self.cascade is not None:
            self.cascade.ended(update)
        self._tell(ObjectsSeen(update, None, ()))
        return update

    def _tell(self, seen: ObjectsSeen) -> None:
        """Each listener in turn; one that fails is logged and counted, and the next still runs."""
        for listener in self.listeners:
            try:
                listener(seen)
            except Exception:
                log.exception("objects: listener %s failed", getattr(listener, "__name__", type(listener).__name__))
                self._on_error()


def _marked(decoded: Detections, update: TrackUpdate) -> Detections:
    """`decoded` with each detection that matched a confirmed object carrying its id and stationary flag.

    The loop runs over the objects seen in this frame, not over the detections: detections nobody tracks
    (other labels, weak or masked ones) are passed on as they are.
    """
    detections: list[Detection] | None = None
    for tracked in update.objects:
        index = tracked.detection_index
        if index is None:
            continue
        if detections is None:
            detections = list(decoded.detections)
        found = detections[index]
        detections[index] = Detection(
            found.label, found.score, found.box, found.keypoints, tracked.id, tracked.stationary
        )
    return decoded if detections is None else Detections(tuple(detections))


def _placed(decoded: Detections, update: TrackUpdate, zones_of: ZonesOf) -> Detections:
    """`decoded` with each marked detection of an object whose zones are known carrying them."""
    detections: list[Detection] | None = None
    for tracked in update.objects:
        index = tracked.detection_index
        zones = zones_of(tracked.id) if index is not None else None
        if index is None or zones is None:
            continue
        if detections is None:
            detections = list(decoded.detections)
        detections[index] = replace(detections[index], zones=zones)
    return decoded if detections is None else Detections(tuple(detections))


def object_stage_for(
    config: TrackConfig | None,
    listeners: Sequence[ObjectListener] = (),
    on_error: Callable[[], None] | None = None,
    zones_of: ZonesOf | None = None,
    cascade: Cascade | None = None,
) -> ObjectStage | None:
    """The stage a pipeline's `track:` section asks for; None without one, or with `enabled: false`."""
    if config is None or not config.enabled:
        return None
    return ObjectStage(config, listeners, on_error, zones_of, cascade)
