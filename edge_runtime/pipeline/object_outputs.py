"""What a camera pipeline tells about its objects over time: events, line crossings, counts, occupancy, pictures.

The objects stage hands every frame's `TrackUpdate` here, on the post thread (see `objects`). Zones place
each object and lines count its crossings; `ObjectEvents` and `PresenceCounts` then decide what to tell.
A pipeline without zones, lines or events has none of this: no listener, and no cost per frame. While
the motion gate holds frames back, the stage coasts: objects stand where they were, and zones and lines
take such an update like an analysed frame, so someone standing still in a zone still enters it after
`inertia` updates, and loitering time runs on.

Where each message goes, and why:

- Events and crossings go through the spooling publisher, QoS 1, not retained. Each is a thing that
  happened once, which a subscriber that alerts or counts must receive even when the broker was away:
  the spool keeps it through the outage.
- Counts, zone counts, occupancy and line totals are retained states, put through the daemon's
  `RetainedStates`, never through the spool: only their latest value means anything, and an old count
  sent again from the spool after a newer one would leave the broker holding a stale value. The whole
  state (zeros, OFF) is put when the pipeline starts, so a box that restarted never leaves a subscriber
  believing someone is still in the yard, and again at every new broker session. When the pipeline stops,
  its counts and occupancy go back to zero and OFF, as its events end: nothing is watched any more.
- An event's pictures go at QoS 0, not retained, so never into the spool: a JPEG is some ten to fifty
  kilobytes, and an outage of a day on a busy camera would fill the spool with pictures and push out the
  events and results it is there to keep. They are sent while the broker is there and lost while it is
  not; the event messages say which picture was sent. The retained `<label>/snapshot` is a state: its
  latest picture is put directly and again at every new session, so it survives an outage as one picture
  per label.

A put that fails (a connection refusing the message) leaves the broker's states unsure, so the next
frame puts all of them rather than only what changed; a failure is the objects stage's to log and count.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from edge_runtime.mqtt.topics import Topics
from edge_runtime.pipeline.object_snapshots import KeptViews
from edge_runtime.pipeline.objects import ObjectsSeen
from edge_runtime.pipeline.outputs import MessageSink
from edge_runtime.pipeline.results import encode
from edge_runtime.sources.base import Frame
from edge_runtime.tracking.counts import CountsChange, PresenceCounts, RetainedState
from edge_runtime.tracking.events import EventBatch, EventsConfig, FindingsOf, ObjectEvents
from edge_runtime.tracking.lines import LineConfig, Lines
from edge_runtime.tracking.objects import TrackUpdate
from edge_runtime.tracking.presence import ObjectZones
from edge_runtime.tracking.zones import ZoneConfig, Zones

log = logging.getLogger(__name__)

__all__ = ["EVENT_QOS", "PICTURE_QOS", "ObjectOutputs", "RetainedPut"]

EVENT_QOS = 1  # events and crossings: spooled, delivered at least once
PICTURE_QOS = 0  # an event's pictures: sent while connected, never spooled

RetainedPut = Callable[[str, bytes], None]  # a retained state's latest value: `RetainedStates.put` in the daemon


class ObjectOutputs:
    """The zones, lines, events and counts of one camera pipeline, and what they publish.

    A listener of the objects stage (`__call__` per frame, `start` and `stop` around them); not thread-safe:
    the pipeline's post thread calls it, and its `start` before that thread runs."""

    def __init__(
        self,
        *,
        pipeline: str,
        topics: Topics,
        sink: MessageSink,
        retained: RetainedPut,
        labels: Sequence[str],
        zones: Mapping[str, ZoneConfig] | None = None,
        lines: Mapping[str, LineConfig] | None = None,
        events: EventsConfig | None = None,
        findings_of: FindingsOf | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`labels`: the labels counted from the start, at zero (the tracked labels, or the model's);
        `findings_of`: what the pipeline's cascade holds of each object, for its events."""
        self.pipeline = pipeline
        self.topics = topics
        self._sink = sink
        self._retained = retained
        started_at = clock()
        self.zones = Zones(zones) if zones else None
        self.lines = Lines(lines, started_at) if lines else None
        self.events = ObjectEvents(events, pipeline, findings_of) if events is not None and events.enabled else None
        pictures = events is not None and events.enabled and events.snapshot.enabled
        self.views = KeptViews(events.snapshot) if events is not None and pictures else None
        self.counts = PresenceCounts(
            labels,
            started_at,
            {name: zone.labels for name, zone in (zones or {}).items()},
            {name: line.labels for name, line in (lines or {}).items()},
        )
        self._events_topic = topics.events(pipeline)
        self._frame_size: tuple[int, int] | None = None
        self._time = started_at
        self._zones_now: dict[str, tuple[str, ...]] = {}
        self._states_unsure = False  # a put failed: the broker may hold states older than the counts'

    def start(self) -> None:
        """Put every retained state at its value now: zeros and OFF before the first frame."""
        self._states_unsure = True
        self._put(self.counts.full_state())
        self._states_unsure = False

    def __call__(self, seen: ObjectsSeen) -> None:
        self._zones_now = {}
        update = seen.update
        self._time = update.timestamp
        if seen.frame is not None:
            height, width = seen.frame.image.shape[:2]
            self._frame_size = (int(width), int(height))
        size = self._frame_size
        if size is None:  # a coast before the first analysed frame: no object was ever seen
            return
        placed: dict[str, ObjectZones] = {}
        if self.zones is not None:
            report = self.zones.update_from(update, size)
            placed = report.objects | report.ended
            self._zones_now = {object_id: where.current for object_id, where in report.objects.items()}
        crossings = self.lines.update_from(update, size) if self.lines is not None else ()
        totals = self.lines.totals() if crossings and self.lines is not None else None
        self._publish(self.counts.update(update, placed, crossings, totals))
        if self.events is not None:
            self._tell(self.events.update(update, placed, size), seen.frame)

    def stop(self) -> None:
        """The pipeline stopped: every open event ends, and the counts and occupancy go back to zero and OFF."""
        if self.events is not None:
            self._tell(self.events.finish(), None)
        self._publish(self.counts.update(TrackUpdate(self._time, (), ())))

    def zones_of(self, object_id: str) -> tuple[str, ...] | None:
        """The zones the object is in as of the latest frame; None if this frame did not place it."""
        return self._zones_now.get(object_id)

    def _tell(self, batch: EventBatch, frame: Frame | None) -> None:
        """An event batch in the order `EventBatch` asks: keep frames, send pictures, messages, then release."""
        views = self.views
        if views is not None:
            for keep in batch.keep:
                if frame is not None:
                    views.keep(keep.event_id, keep.view, frame.image)
            for order in batch.snapshots:
                picture = views.picture(order)
                if picture is None:
                    log.warning("pipeline %s: no kept view for the picture of %s", self.pipeline, order.event_id)
                elif order.per_label:
                    self._retained(self.topics.label_snapshot(self.pipeline, order.label), picture)
                else:
                    topic = self.topics.event_snapshot(self.pipeline, order.event_id)
                    self._sink.publish(topic, picture, PICTURE_QOS, False)
            views.release(batch.released)
        for message in batch.messages:
            self._sink.publish(self._events_topic, encode(message), EVENT_QOS, False)

    def _publish(self, change: CountsChange) -> None:
        """The states that changed, or every state where a put failed before (the counts take a change as
        told once it is measured), then the crossings."""
        states = self.counts.full_state() if self._states_unsure else change.retained
        self._states_unsure = True
        self._put(states)
        self._states_unsure = False
        for crossing in change.crossings:
            self._sink.publish(crossing.topic(self.topics, self.pipeline), crossing.payload(), EVENT_QOS, False)

    def _put(self, states: Sequence[RetainedState]) -> None:
        for state in states:
            self._retained(state.topic(self.topics, self.pipeline), state.payload())
