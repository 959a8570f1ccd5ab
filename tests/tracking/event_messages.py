"""Helpers for the event and count tests: tracked objects made by hand, and the messages' JSON Schemas.

Every message a test produces goes through `valid`, so the schemas shipped in the package are checked
against everything the code says, not against examples written beside it.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import jsonschema

from edge_runtime.tracking.objects import TrackedObject, TrackUpdate

FRAME = (1280, 720)
Box = tuple[float, float, float, float]


def schema(name: str) -> dict[str, Any]:
    text = resources.files("edge_runtime.schemas").joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


VALIDATORS = {
    name: jsonschema.Draft202012Validator(schema(name), format_checker=jsonschema.FormatChecker())
    for name in ("event", "crossing", "totals")
}


def valid(name: str, messages: Any) -> Any:
    """`messages` (one message or a sequence of them), after checking each against its schema and that it
    survives JSON as it is."""
    for message in [messages] if isinstance(messages, dict) else messages:
        VALIDATORS[name].validate(message)
        assert json.loads(json.dumps(message)) == message
    return messages


def tracked(
    time: float,
    box: Box = (500.0, 300.0, 560.0, 450.0),
    score: float = 0.9,
    *,
    serial: int = 1,
    start: float = 0.0,
    label: str = "person",
    stationary: bool = False,
    seen: bool = True,
) -> TrackedObject:
    """An object as the tracker reports it at `time` (its id says when it started and its serial)."""
    return TrackedObject(
        id=f"{start:.3f}-{serial}",
        label=label,
        box=box,
        score=score,
        top_score=max(score, 0.8),
        stationary=stationary,
        hits=3,
        start_time=start,
        last_seen=time if seen else start,
        age_s=time - start,
        detection_index=0 if seen else None,
    )


def frame(time: float, *objects: TrackedObject, ended: tuple[TrackedObject, ...] = ()) -> TrackUpdate:
    return TrackUpdate(time, tuple(objects), ended)
