"""What a pipeline's zones, lines, events and cascade ask of its other sections, checked with the path of each field.

Zones, lines and events are about tracked objects: without an active `track` section there are none, so
each of them needs one. A label they name must be one the tracker follows where `track.labels` says which
(a zone taking cars on a pipeline that tracks people only would never see one), and the zones events
wait for (`events.required_zones`) must be zones of the pipeline. A cascade runs without tracking too (on
every frame's detections), but with a track section that names its labels, a stage's labels must be
tracked: it runs per tracked object, and an untracked label never becomes one. Whether the model gives those labels at
all is checked against its manifest with the rest of the box (`config.checks`).

The problems are raised together as one pydantic error whose locations lie below the pipeline, so a user
reads `pipelines[0].zones.yard.labels[1]: 'car' is not tracked` rather than a message about the pipeline
as a whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from edge_runtime.config.cascade import CascadeStageConfig
from edge_runtime.tracking.config import TrackConfig
from edge_runtime.tracking.events import EventsConfig
from edge_runtime.tracking.lines import LineConfig
from edge_runtime.tracking.zones import ZoneConfig

__all__ = ["check_object_sections", "object_section_problems"]

Location = tuple[str | int, ...]


def object_section_problems(
    track: TrackConfig | None,
    zones: Mapping[str, ZoneConfig],
    lines: Mapping[str, LineConfig],
    events: EventsConfig | None,
    cascade: Sequence[CascadeStageConfig] = (),
) -> list[tuple[Location, str]]:
    """Each problem as (location below the pipeline, message); empty when the sections agree."""
    active = [name for name, given in (("zones", zones), ("lines", lines)) if given]
    if events is not None and events.enabled:
        active.append("events")
    if track is None or not track.enabled:
        reason = "add a track section" if track is None else "track.enabled is false"
        return [
            ((section,), f"needs track: {section} follow tracked objects, and none are tracked ({reason})")
            for section in active
        ]
    problems: list[tuple[Location, str]] = []
    if track.labels:
        named: list[tuple[Location, Sequence[str]]] = [
            (("zones", name, "labels"), zone.labels) for name, zone in zones.items()
        ]
        named += [(("lines", name, "labels"), line.labels) for name, line in lines.items()]
        if events is not None and events.enabled:
            named.append((("events", "labels"), events.labels))
        named += [(("cascade", index, "labels"), stage.labels) for index, stage in enumerate(cascade)]
        tracked = ", ".join(track.labels)
        for at, labels in named:
            problems += [
                ((*at, index), f"{label!r} is not tracked, so no object of it is ever seen (track.labels: {tracked})")
                for index, label in enumerate(labels)
                if label not in track.labels
            ]
    if events is not None and events.enabled:
        known = f"its zones: {', '.join(zones)}" if zones else "it has none"
        problems += [
            (("events", "required_zones", index), f"{zone!r} is not a zone of this pipeline ({known})")
            for index, zone in enumerate(events.required_zones)
            if zone not in zones
        ]
    return problems


def check_object_sections(
    title: str,
    track: TrackConfig | None,
    zones: Mapping[str, ZoneConfig],
    lines: Mapping[str, LineConfig],
    events: EventsConfig | None,
    cascade: Sequence[CascadeStageConfig] = (),
) -> None:
    """Raise every problem of `object_section_problems` as one ValidationError of the model `title`, each
    at its own location below it."""
    problems = object_section_problems(track, zones, lines, events, cascade)
    if not problems:
        return
    errors = [
        InitErrorDetails(
            type=PydanticCustomError("value_error", "Value error, {problem}", {"problem": message}),
            loc=at,
            input=None,
        )
        for at, message in problems
    ]
    raise ValidationError.from_exception_data(title, errors)
