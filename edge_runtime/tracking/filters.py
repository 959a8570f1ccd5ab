"""Which detections the tracker looks at: tracked labels, outside the masks, of a plausible size and shape.

These are Frigate's object filters and masks, applied before association so that a detection rejected
here can neither start a track nor keep one alive. A mask tests the bottom centre of a box, the point
where the object stands: a person walking in front of a masked hedge is still seen, a swaying hedge
detected as a person is not (Frigate: "object masks operate based on the bottom center").

Areas given above 1 are pixels, at or below 1 fractions of the frame, so a fraction keeps its meaning
when a camera is switched to another resolution and a pixel count stays exact where that matters.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from edge_runtime.tracking.config import ObjectFilter, TrackConfig

__all__ = ["DetectionFilter", "inside_polygon"]

Array = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]


def inside_polygon(points: Array, polygon: Array) -> Mask:
    """Whether each point (N×2) lies inside the polygon (K×2 vertices), by the even-odd rule.

    A point exactly on an edge may fall either way; a mask drawn by hand is never that precise.
    """
    x, y = points[:, 0:1], points[:, 1:2]
    start = polygon
    end = np.roll(polygon, -1, axis=0)
    straddles = (start[None, :, 1] > y) != (end[None, :, 1] > y)
    rise = end[:, 1] - start[:, 1]
    safe_rise = np.where(rise == 0, 1.0, rise)
    crossing_x = start[None, :, 0] + (y - start[None, :, 1]) * (end[:, 0] - start[:, 0])[None, :] / safe_rise
    crossings = straddles & (x < crossing_x)
    return np.asarray(np.count_nonzero(crossings, axis=1) % 2 == 1)


class DetectionFilter:
    """The `track` config's labels, masks and per-label filters, ready to apply to a frame's detections."""

    def __init__(self, config: TrackConfig) -> None:
        self.config = config
        self._masks = [np.asarray(polygon, dtype=np.float64) for polygon in config.masks]
        self._filters: dict[str, ObjectFilter] = {}
        self._tracked = frozenset(config.labels)
        # A label's filter is its entry's fields over the default entry's: when no entry limits the size or
        # shape, no label's filter does, and the per-frame search for labels to check is skipped.
        self._limits_any_shape = any(_limits_shape(rule) for rule in config.filters.values())
        self._limits_label_shape: dict[str, bool] = {}

    def filter_for(self, label: str) -> ObjectFilter:
        found = self._filters.get(label)
        if found is None:
            found = self._filters[label] = self.config.filter_for(label)
        return found

    def admit(self, labels: Sequence[str], boxes: Array, scores: Array, frame_size: tuple[int, int]) -> Mask:
        """Which detections the tracker takes: tracked label, score at least `scores.low`, not masked,
        and within their label's area and ratio limits. `frame_size` is (width, height) in pixels."""
        width, height = frame_size
        admitted = scores >= self.config.scores.low
        if self.config.labels:
            tracked = self._tracked
            admitted &= np.fromiter((label in tracked for label in labels), bool, len(labels))
        if not np.count_nonzero(admitted):
            return admitted
        if self._masks:
            feet = np.stack([(boxes[:, 0] + boxes[:, 2]) / (2 * width), boxes[:, 3] / height], axis=1)
            for polygon in self._masks:
                admitted &= ~inside_polygon(feet, polygon)
        if not self._limits_any_shape:
            return admitted
        limited = [label for label in set(labels) if self._limits_shape(label)]
        if not limited:
            return admitted
        sizes = boxes[:, 2:4] - boxes[:, 0:2]
        areas = sizes[:, 0] * sizes[:, 1]
        ratios = sizes[:, 0] / np.maximum(sizes[:, 1], 1e-9)
        frame_area = float(width * height)
        label_array = np.asarray(labels, dtype=object)
        for label in limited:
            rule = self.filter_for(label)
            fits = areas >= _pixels(rule.min_area, frame_area)
            if rule.max_area is not None:
                fits &= areas <= _pixels(rule.max_area, frame_area)
            fits &= ratios >= rule.min_ratio
            if rule.max_ratio is not None:
                fits &= ratios <= rule.max_ratio
            admitted &= (label_array != label) | fits
        return admitted

    def _limits_shape(self, label: str) -> bool:
        limits = self._limits_label_shape.get(label)
        if limits is None:
            limits = self._limits_label_shape[label] = _limits_shape(self.filter_for(label))
        return limits


def _limits_shape(rule: ObjectFilter) -> bool:
    return rule.min_area > 0 or rule.max_area is not None or rule.min_ratio > 0 or rule.max_ratio is not None


def _pixels(area: float, frame_area: float) -> float:
    return area if area > 1 else area * frame_area
