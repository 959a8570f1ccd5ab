"""The JPEG of a tracked object's best view, as an event's snapshot settings ask for it.

The events (edge_runtime.tracking.events) decide which frame, which box and when; this draws it. The
crop is a square around the object, like Frigate's: a subscriber's phone shows a notification thumbnail
square, and a square keeps a standing person and a parked car at the same scale. It is `CROP_SCALE`
times the box's longer side so the object keeps a little of its surroundings, and never narrower than
the picture's height where the frame allows, so a distant object is shown in its context instead of
blown up into a blur.

Memory: an event's best frame must be kept until its picture is sent (the 5 s limit and the `end`
picture send frames from the past). With `crop` on, keep `image[crop_region(...)]` rather than the whole
frame and pass the box moved by the region's corner (`box_within`): a 1080p frame is 6 MB, a crop of a
person a tenth of that. `KeptViews` keeps those crops for the open events and makes their pictures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import cv2
import numpy as np

from edge_runtime.tracking.snapshots import Box, ObjectView, SnapshotOrder, SnapshotSettings

__all__ = ["BOX_COLOUR", "CROP_SCALE", "KeptViews", "box_within", "crop_region", "object_snapshot_jpeg"]

CROP_SCALE = 1.1  # Frigate's crop: the box's longer side times 1.1
BOX_COLOUR = (0, 200, 0)  # BGR, as the pipeline's annotated snapshot draws detections


def crop_region(frame_size: tuple[int, int], box: Box, min_side: int) -> tuple[int, int, int, int]:
    """The square (x_min, y_min, x_max, y_max, in whole pixels) a cropped picture shows: centred on the
    box where the frame allows, shifted inside it at an edge, and cut to the frame when larger than it."""
    width, height = frame_size
    x_min, y_min, x_max, y_max = box
    side = max(round(max(x_max - x_min, y_max - y_min) * CROP_SCALE), min_side, 1)
    starts = []
    for centre, extent in (((x_min + x_max) / 2, width), ((y_min + y_max) / 2, height)):
        length = min(side, extent)
        starts.append((min(max(round(centre - length / 2), 0), extent - length), length))
    (left, region_width), (top, region_height) = starts
    return left, top, left + region_width, top + region_height


def box_within(box: Box, region: tuple[int, int, int, int]) -> Box:
    """The box in the coordinates of a crop whose top-left corner is the region's."""
    left, top = region[0], region[1]
    return (box[0] - left, box[1] - top, box[2] - left, box[3] - top)


def object_snapshot_jpeg(
    image: np.ndarray, box: Box, settings: SnapshotSettings, caption: str | None = None, cropped: bool = False
) -> bytes:
    """The picture of the object at `box` in `image` (BGR), cropped, boxed, scaled and encoded as the
    settings say. `cropped`: `image` is already the crop (kept by the pipeline) and `box` is within it.
    `caption` is written above the box when the box is drawn (e.g. "person 0.91")."""
    if settings.crop and not cropped:
        frame_height, frame_width = image.shape[:2]
        region = crop_region((frame_width, frame_height), box, settings.height)
        image = image[region[1] : region[3], region[0] : region[2]]
        box = box_within(box, region)
    source_height, source_width = image.shape[:2]
    scale = settings.height / source_height
    size = (max(round(source_width * scale), 1), settings.height)
    interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    picture = cv2.resize(image, size, interpolation=interpolation)
    if settings.box:
        x_min, y_min, x_max, y_max = (round(value * scale) for value in box)
        cv2.rectangle(picture, (x_min, y_min), (x_max, y_max), BOX_COLOUR, 2)
        if caption:  # dark text on a band of the box's colour, legible on any background
            (text_width, text_height), baseline = cv2.getTextSize(caption, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
            left, bottom = max(x_min, 0), max(y_min, text_height + baseline + 2)
            top = bottom - text_height - baseline - 2
            cv2.rectangle(picture, (left, top), (left + text_width + 4, bottom), BOX_COLOUR, cv2.FILLED)
            origin = (left + 2, bottom - baseline - 1)
            cv2.putText(picture, caption, origin, cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    ok, encoded = cv2.imencode(".jpg", picture, [cv2.IMWRITE_JPEG_QUALITY, settings.quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return encoded.tobytes()


@dataclass(frozen=True)
class _Kept:
    view: ObjectView
    image: np.ndarray  # the crop the picture shows, or the whole frame without `crop`
    region: tuple[int, int, int, int]  # where `image` lies in the frame


class KeptViews:
    """Each open event's best view, kept as the pixels its picture needs until the event is released.

    One view per event: a better one replaces it (events keep a frame only when it becomes the event's
    best view), so memory follows the events open, a crop each, not the frames seen."""

    def __init__(self, settings: SnapshotSettings) -> None:
        self.settings = settings
        self._kept: dict[str, _Kept] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, event_id: str, view: ObjectView, image: np.ndarray) -> None:
        """Copy what the picture of `view` needs out of the frame `image` (BGR), which the caller reuses."""
        height, width = image.shape[:2]
        region = crop_region((int(width), int(height)), view.box, self.settings.height) if self.settings.crop else None
        if region is None:
            region = (0, 0, int(width), int(height))
        pixels = image[region[1] : region[3], region[0] : region[2]].copy()
        self._kept[event_id] = _Kept(view, pixels, region)

    def picture(self, order: SnapshotOrder) -> bytes | None:
        """The JPEG of the view `order` names; None when that view is not the one kept for its event."""
        kept = self._kept.get(order.event_id)
        if kept is None or kept.view != order.view:
            return None
        caption = f"{order.label} {order.view.score:.2f}"
        box = box_within(order.view.box, kept.region)
        return object_snapshot_jpeg(kept.image, box, self.settings, caption, cropped=True)

    def release(self, event_ids: Iterable[str]) -> None:
        for event_id in event_ids:
            self._kept.pop(event_id, None)
