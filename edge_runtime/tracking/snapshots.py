"""Which frame shows a tracked object best, and which pictures of it to send.

An event's picture is its best view so far, chosen by Frigate's rule (`is_better_view`): a view replaces
the current best when its score is more than `SCORE_MARGIN` higher, or its box more than `AREA_GROWTH`
times larger, unless the new box touches the frame's edge and the current one does not (a person cut in
half by the edge is a poor picture however confident the detector). So a bigger, surer view wins, and a
parked car whose score jitters by a few hundredths does not send a new picture every frame: each
replacement raises the bar, so a still object soon stops producing better views.

Only frames in which the detector found the object are candidates: when the tracker coasts over a miss,
the box is a prediction and the frame may not show the object at all.

The encoding (crop, box, scaling, JPEG) happens in the pipeline, with OpenCV, which this package does not
load: here only the decisions are made, naming the event, the frame by its capture time, and the box.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from edge_runtime.config.base import StrictModel

__all__ = [
    "AREA_GROWTH",
    "BETTER_SNAPSHOT_INTERVAL_S",
    "EDGE_MARGIN_PX",
    "SCORE_MARGIN",
    "Box",
    "KeepFrame",
    "LabelBests",
    "ObjectView",
    "SnapshotOrder",
    "SnapshotSettings",
    "is_better_view",
    "on_edge",
]

Box = tuple[float, float, float, float]  # x_min, y_min, x_max, y_max in source pixels

SCORE_MARGIN = 0.05  # Frigate: "if the score is better by more than 5%"
AREA_GROWTH = 1.1  # Frigate: "if the area is 10% larger"
EDGE_MARGIN_PX = 1.0  # boxes are clipped to the frame, so one reaching past an edge ends on it
BETTER_SNAPSHOT_INTERVAL_S = 5.0  # Frigate publishes a better thumbnail at most every 5 s per object


class SnapshotSettings(StrictModel):
    """The pictures of tracked objects sent over MQTT (Frigate's `mqtt` snapshot settings and defaults)."""

    enabled: bool = Field(
        default=True,
        description="send a JPEG of each event's best frame on events/<id>/snapshot, and of the latest best "
        "object of each label on <label>/snapshot (retained)",
    )
    crop: bool = Field(
        default=True,
        description="cut a square around the object (with a margin, at least `height` pixels a side where the "
        "frame allows) instead of sending the whole frame",
    )
    box: bool = Field(default=True, description="draw the object's box and label on the picture")
    height: int = Field(
        default=270,
        ge=16,
        le=4320,
        description="height in pixels the picture is scaled to, keeping its aspect ratio",
    )
    quality: int = Field(default=70, ge=1, le=100, description="JPEG quality, 1-100")
    label_refresh_s: float = Field(
        default=60.0,
        gt=0,
        description="the retained <label>/snapshot takes a newer object's picture, even a worse one, once the "
        "picture it shows is this many seconds old (Frigate's best_image_timeout)",
    )


@dataclass(frozen=True)
class ObjectView:
    """An object as one frame shows it: the frame's capture time, the box in it and the detector's score."""

    frame_time: float
    box: Box
    score: float

    @property
    def area(self) -> float:
        x_min, y_min, x_max, y_max = self.box
        return max(x_max - x_min, 0.0) * max(y_max - y_min, 0.0)

    def message(self) -> dict[str, float | int | list[float]]:
        """The view as the event message's `snapshot` field describes it."""
        return {
            "frame_time": round(self.frame_time, 3),
            "box": [round(value, 1) for value in self.box],
            "score": round(self.score, 3),
            "area": round(self.area),
        }


@dataclass(frozen=True)
class KeepFrame:
    """This frame is now the event's best view: keep it (or the part the picture needs) until the event
    is released or another `KeepFrame` for the same event replaces it."""

    event_id: str
    view: ObjectView


@dataclass(frozen=True)
class SnapshotOrder:
    """Encode and send a picture of the event's kept frame (the one `view.frame_time` names).

    `per_label` False: on the event's own snapshot topic, not retained. True: on the retained
    <label>/snapshot topic, which shows the latest best object of the label."""

    event_id: str
    label: str
    view: ObjectView
    per_label: bool


def on_edge(box: Box, frame_size: tuple[int, int]) -> bool:
    """Whether the box touches the frame's edge (so the object is likely cut off)."""
    width, height = frame_size
    x_min, y_min, x_max, y_max = box
    return (
        x_min <= EDGE_MARGIN_PX
        or y_min <= EDGE_MARGIN_PX
        or x_max >= width - EDGE_MARGIN_PX
        or y_max >= height - EDGE_MARGIN_PX
    )


def is_better_view(current: ObjectView, new: ObjectView, frame_size: tuple[int, int]) -> bool:
    """Frigate's rule for a better thumbnail (see the module's docstring)."""
    if on_edge(new.box, frame_size) and not on_edge(current.box, frame_size):
        return False
    return new.score > current.score + SCORE_MARGIN or new.area > current.area * AREA_GROWTH


class LabelBests:
    """The picture each label's retained snapshot shows, and whether an event's new best replaces it.

    Like Frigate's best object per label: a better view replaces it, and so does any new view once the
    shown one is `refresh_s` old, so the retained picture follows what happens rather than keeping the
    best person of last week."""

    def __init__(self, refresh_s: float) -> None:
        self.refresh_s = refresh_s
        self._shown: dict[str, ObjectView] = {}

    def offer(self, label: str, view: ObjectView, frame_size: tuple[int, int]) -> bool:
        """Take `view` as the label's picture if it should be shown; say whether it was taken."""
        shown = self._shown.get(label)
        if (
            shown is not None
            and view.frame_time - shown.frame_time <= self.refresh_s
            and not is_better_view(shown, view, frame_size)
        ):
            return False
        self._shown[label] = view
        return True

    def shown(self, label: str) -> ObjectView | None:
        return self._shown.get(label)
