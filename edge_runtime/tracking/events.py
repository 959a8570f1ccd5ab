"""Tracked objects told as events, the way Frigate tells them: `new`, `update`s, and one `end`.

Each message is `{"type": "new" | "update" | "end", "before": {...} | null, "after": {...}}` (see
`edge_runtime/schemas/event.schema.json`): `after` describes the object as of this frame, `before` as the
previous message described it, so a subscriber sees what changed without keeping state of its own.

- `new` once, when the tracker first reports the object (it is confirmed and not a false positive: the
  tracker never shows the others) and, with `required_zones`, once it has entered one of them.
- `update` when what a subscriber acts on changed: the zones it is in, stationary or moving again, a
  sub-label a cascade newly gave it (where the pipeline has a cascade, the object carries `sub_label` and
  `attributes`: its class scores; see `pipeline.cascade`); when a
  better picture of it exists and its last picture is `BETTER_SNAPSHOT_INTERVAL_S` old; and at least every
  `heartbeat_s`, so a subscriber that missed messages learns the object is still there. Nothing else: a
  parked car's score and box jitter every frame, and telling each would flood subscribers for hours.
- `end` exactly once, when the tracker says the object left (or `finish` ends what is still open).

Times are capture times in seconds since the epoch. `end_time` is when the object was last seen, not the
later moment the tracker gave up waiting for it, so `end_time - start_time` is how long it was there.

Besides messages, each frame gives picture decisions (`snapshots`): which frames to keep as events' best
views, which pictures to send, and which kept frames may go. The pipeline encodes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from edge_runtime.config.base import StrictModel
from edge_runtime.tracking.config import check_distinct
from edge_runtime.tracking.objects import TrackedObject, TrackUpdate
from edge_runtime.tracking.presence import ObjectZones
from edge_runtime.tracking.snapshots import (
    BETTER_SNAPSHOT_INTERVAL_S,
    KeepFrame,
    LabelBests,
    ObjectView,
    SnapshotOrder,
    SnapshotSettings,
    is_better_view,
)

__all__ = ["EventBatch", "EventType", "EventsConfig", "FindingsOf", "ObjectEvents"]

if TYPE_CHECKING:  # the decoders' results import OpenCV, which events and counts have no use for
    from edge_runtime.decoders.decoded import Attribute, SubLabel

FindingsOf = Callable[[str], "tuple[SubLabel | None, tuple[tuple[str, Attribute], ...]]"]  # by object id

EventType = Literal["new", "update", "end"]

NOWHERE = ObjectZones()


class EventsConfig(StrictModel):
    """Messages on <pipeline>/events when tracked objects come, change and go (Frigate's events)."""

    enabled: bool = Field(default=True, description="false keeps the section in the file without events")
    labels: list[str] = Field(
        default_factory=list,
        description="labels that make events; other tracked objects are still counted; empty: every tracked label",
    )
    required_zones: list[str] = Field(
        default_factory=list,
        description="an object's event starts only once it has entered one of these zones (a person on the "
        "pavement beyond the drive makes none); empty: every object makes an event",
    )
    heartbeat_s: float = Field(
        default=60.0,
        gt=0,
        description="an update is sent at least this often while the object stays, even if nothing changed "
        "(Frigate: once a minute)",
    )
    snapshot: SnapshotSettings = Field(
        default_factory=SnapshotSettings, description="pictures of the objects sent with their events"
    )

    @field_validator("labels", "required_zones")
    @classmethod
    def _distinct_names(cls, names: list[str], info: ValidationInfo) -> list[str]:
        return check_distinct(names, "label" if info.field_name == "labels" else "zone")


@dataclass(frozen=True)
class EventBatch:
    """What one frame changed: messages for <pipeline>/events, and what to do with pictures.

    The pipeline handles `keep` first (copying the current frame, or the crop a picture needs, for each
    event named), then encodes each of `snapshots` from the frame kept for its event, then drops the
    frames kept for `released` events."""

    messages: tuple[dict[str, Any], ...] = ()
    keep: tuple[KeepFrame, ...] = ()
    snapshots: tuple[SnapshotOrder, ...] = ()
    released: tuple[str, ...] = ()


@dataclass(slots=True)
class _Event:
    """One object's event state, from its first report until it ends."""

    obj: TrackedObject
    zones: ObjectZones
    best: ObjectView | None = None  # its best view so far (snapshots enabled only)
    sent: ObjectView | None = None  # the view its last picture showed
    sent_at: float = float("-inf")  # frame time its last picture was sent
    published: dict[str, Any] | None = None  # the `after` of its last message; None before `new`
    published_at: float = float("-inf")


class ObjectEvents:
    """Turns each frame's tracked objects and their zones into event messages and picture decisions.

    Not thread-safe: the pipeline's post thread calls it after the tracker and the zones."""

    def __init__(self, config: EventsConfig, pipeline: str, findings_of: FindingsOf | None = None) -> None:
        """`findings_of`: what the pipeline's cascade holds of an object (None: the pipeline has no cascade)."""
        self.config = config
        self.pipeline = pipeline
        self._findings_of = findings_of
        self._labels = frozenset(config.labels)
        self._required = frozenset(config.required_zones)
        self._pictures = config.snapshot.enabled
        self._label_bests = LabelBests(config.snapshot.label_refresh_s)
        self._events: dict[str, _Event] = {}
        self._time = float("-inf")

    def __len__(self) -> int:
        """Objects followed now, with or without a `new` sent."""
        return len(self._events)

    def update(self, update: TrackUpdate, zones: Mapping[str, ObjectZones], frame_size: tuple[int, int]) -> EventBatch:
        """Take the tracker's answer for a frame of `frame_size` (width, height) pixels, and each object's
        zones (an object missing from `zones` is in none)."""
        if not self.config.enabled:
            return EventBatch()
        now = self._time = update.timestamp
        batch = _Batch()
        present = set()
        for obj in update.objects:
            if self._labels and obj.label not in self._labels:
                continue
            present.add(obj.id)
            event = self._events.get(obj.id)
            if event is None:
                event = self._events[obj.id] = _Event(obj, NOWHERE)
            event.obj, event.zones = obj, zones.get(obj.id, NOWHERE)
            improved = self._improve_view(event, frame_size)
            if improved:
                batch.keep.append(KeepFrame(obj.id, improved))
            if event.published is None:
                if self._required and self._required.isdisjoint(event.zones.entered):
                    continue
                self._send_picture(event, now, batch, held_back=False)
                self._publish(event, "new", now, batch)
                self._offer_to_label(event, frame_size, batch)
                continue
            if self._worth_telling(event, now):
                self._send_picture(event, now, batch, held_back=True)
                self._publish(event, "update", now, batch)
            if improved:
                self._offer_to_label(event, frame_size, batch)
        for obj in update.ended:
            event = self._events.get(obj.id)
            if event is not None:
                event.obj, event.zones = obj, zones.get(obj.id, event.zones)
        for event_id in [event_id for event_id in self._events if event_id not in present]:
            self._end(self._events.pop(event_id), now, batch)  # ended, or no longer reported at all
        return batch.freeze()

    def finish(self) -> EventBatch:
        """End every open event (the pipeline stops), so no subscriber waits for an `end` forever."""
        batch = _Batch()
        for event in self._events.values():
            self._end(event, self._time, batch)
        self._events.clear()
        return batch.freeze()

    def _improve_view(self, event: _Event, frame_size: tuple[int, int]) -> ObjectView | None:
        """This frame's view of the object if it becomes its best view (the frame is then kept), else None."""
        obj = event.obj
        if not self._pictures or not obj.seen:
            return None
        view = ObjectView(self._time, obj.box, obj.score)
        if event.best is not None and not is_better_view(event.best, view, frame_size):
            return None
        event.best = view
        return view

    def _worth_telling(self, event: _Event, now: float) -> bool:
        """Whether a subscriber should hear of the object now: it changed zones, stopped or moved again, a
        better picture waits and the last one is old enough, or the heartbeat is due."""
        published = event.published
        assert published is not None
        return (
            tuple(published["current_zones"]) != event.zones.current
            or published["stationary"] != event.obj.stationary
            or now - event.published_at >= self.config.heartbeat_s
            or (self._findings_of is not None and published["sub_label"] != self._sub_label(event.obj.id))
            or (event.best is not event.sent and now - event.sent_at >= BETTER_SNAPSHOT_INTERVAL_S)
        )

    def _publish(
        self, event: _Event, kind: EventType, now: float, batch: _Batch, end_time: float | None = None
    ) -> None:
        after = self._describe(event, now, end_time)
        batch.messages.append({"type": kind, "before": event.published, "after": after})
        event.published, event.published_at = after, now

    def _send_picture(self, event: _Event, now: float, batch: _Batch, held_back: bool) -> None:
        """Send the event's best view unless it was the last one sent, or unless `held_back` and the last
        was sent less than `BETTER_SNAPSHOT_INTERVAL_S` ago (a `new` or an `end` sends it whatever the time)."""
        best = event.best
        if best is None or best is event.sent or (held_back and now - event.sent_at < BETTER_SNAPSHOT_INTERVAL_S):
            return
        batch.snapshots.append(SnapshotOrder(event.obj.id, event.obj.label, best, per_label=False))
        event.sent, event.sent_at = best, now

    def _offer_to_label(self, event: _Event, frame_size: tuple[int, int], batch: _Batch) -> None:
        best = event.best
        if best is not None and self._label_bests.offer(event.obj.label, best, frame_size):
            batch.snapshots.append(SnapshotOrder(event.obj.id, event.obj.label, best, per_label=True))

    def _end(self, event: _Event, now: float, batch: _Batch) -> None:
        if event.published is not None:
            self._send_picture(event, now, batch, held_back=False)  # the better picture the interval held back
            self._publish(event, "end", now, batch, end_time=event.obj.last_seen)
        if event.best is not None:
            batch.released.append(event.obj.id)

    def _sub_label(self, object_id: str) -> dict[str, Any] | None:
        assert self._findings_of is not None
        sub_label, _ = self._findings_of(object_id)
        return sub_label.to_dict() if sub_label is not None else None

    def _describe(self, event: _Event, now: float, end_time: float | None) -> dict[str, Any]:
        """The object as event messages carry it (Frigate's field names where Frigate has the field)."""
        described = self._described(event, now, end_time)
        if self._findings_of is not None:
            sub_label, attributes = self._findings_of(event.obj.id)
            described["sub_label"] = sub_label.to_dict() if sub_label is not None else None
            described["attributes"] = {name: round(value, 4) for name, value in attributes if isinstance(value, float)}
        return described

    def _described(self, event: _Event, now: float, end_time: float | None) -> dict[str, Any]:
        obj, zones = event.obj, event.zones
        x_min, y_min, x_max, y_max = obj.box
        width, height = max(x_max - x_min, 0.0), max(y_max - y_min, 0.0)
        return {
            "id": obj.id,
            "pipeline": self.pipeline,
            "label": obj.label,
            "score": round(obj.score, 3),
            "top_score": round(obj.top_score, 3),
            "box": [round(value, 1) for value in obj.box],
            "area": round(width * height),
            "ratio": round(width / height, 3) if height > 0 else 0.0,
            "start_time": round(obj.start_time, 3),
            "end_time": None if end_time is None else round(end_time, 3),
            "frame_time": round(now, 3),
            "current_zones": list(zones.current),
            "entered_zones": list(zones.entered),
            "zone_dwell_s": {zone: round(seconds, 1) for zone, seconds in zones.dwell_s.items()},
            "stationary": obj.stationary,
            "has_snapshot": event.sent is not None,
            "snapshot": None if event.sent is None else event.sent.message(),
        }


@dataclass
class _Batch:
    messages: list[dict[str, Any]] = field(default_factory=list)
    keep: list[KeepFrame] = field(default_factory=list)
    snapshots: list[SnapshotOrder] = field(default_factory=list)
    released: list[str] = field(default_factory=list)

    def freeze(self) -> EventBatch:
        return EventBatch(tuple(self.messages), tuple(self.keep), tuple(self.snapshots), tuple(self.released))
