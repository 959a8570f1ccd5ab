"""What decoders return: one small result type per task, each able to say three things.

- `to_dict()` is the `result` object of a result message (JSON-ready: plain lists, dicts, rounded floats).
- `top_score` is the best confidence in the result. Results with no notion of confidence (segmentation,
  regression, raw) return None; a result that could have had scores but found nothing (no detections)
  returns 0.0.
- `scoring_at_least(min_score)` feeds "publish only what scores at least `publish.min_score`". A result
  made of scored items (detections, classes) keeps the items at or above it, and is None when none
  is left; a result with one score for the whole (a keypoint set's mean, an anomaly score) is kept or
  dropped whole; a result without scores is always kept.
- `signature()` feeds "publish only on change": two results with equal signatures are the same news to
  a subscriber. It keeps what a person would call a change (a new object, a different top class, a
  keypoint appearing) and drops what jitters every frame (scores, box coordinates). Per task:

  ============== ==========================================================================
  detection      sorted labels, one entry per object (a second person arriving is a change)
  classification the top class label
  segmentation   sorted labels of the classes present (area above the decoder's min_area)
  keypoints      sorted names of the keypoints found (score at or above min_score)
  anomaly        "anomalous" or "normal"
  regression     each value rounded to the decoder's `resolution` (default: 3 significant digits)
  raw            a digest of the published (rounded, capped) values
  ============== ==========================================================================
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar


def _round(value: float, digits: int) -> float:
    return round(float(value), digits)


def _negated_score(item: Detection | ClassScore) -> float:
    """The sort key under which items listed best first are ascending, for bisection."""
    return -item.score


def _json_number(value: float, digits: int) -> float | None:
    """A rounded number, or None (JSON null) for NaN and infinities, which JSON cannot carry."""
    return round(value, digits) if math.isfinite(value) else None


class Decoded(ABC):
    """A decoded result; `task` is the result message's `task` field."""

    task: ClassVar[str]

    @abstractmethod
    def to_dict(self) -> dict[str, Any]: ...

    @property
    @abstractmethod
    def top_score(self) -> float | None: ...

    @abstractmethod
    def signature(self) -> tuple[str, ...]: ...

    def scoring_at_least(self, min_score: float) -> Decoded | None:
        """The part of this result to publish under a score threshold; None when nothing of it is left.
        Here for results with one score for the whole, or none; results of scored items override it."""
        score = self.top_score
        return self if score is None or score >= min_score else None


@dataclass(frozen=True)
class Landmark:
    """A named point of a detected object (a face's eye), in source-image pixels where the model places it.

    Not clipped: a point the model places beyond the frame's edge (an ear turned out of the picture) keeps its
    position, and `in_frame` says it is not on the frame, so it is never mistaken for a point on the edge.
    """

    name: str
    x: float
    y: float
    in_frame: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "x": _round(self.x, 1), "y": _round(self.y, 1), "in_frame": self.in_frame}


@dataclass(frozen=True)
class SubLabel:
    """A name a second model gave an object (a person's name, a plate's text), with its score."""

    label: str
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "score": _round(self.score, 4)}


@dataclass(frozen=True)
class Keypoint:
    """One keypoint of a subject, in source-image pixels where the model places it; not clipped (see `Landmark`)."""

    name: str
    x: float
    y: float
    score: float
    in_frame: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "x": _round(self.x, 1),
            "y": _round(self.y, 1),
            "score": _round(self.score, 4),
            "in_frame": self.in_frame,
        }


Attribute = float | tuple[Keypoint, ...]  # a class's score, or a keypoint model's points


@dataclass(frozen=True)
class Detection:
    """One object, with its box in source-image pixels, clipped to the frame, and its landmarks, not clipped.

    `track_id` and `stationary` are set by a pipeline that tracks objects, on the detections that are a
    confirmed object; a decoder leaves them None, and a detection without them publishes neither key.
    `zones` is set beside them by a pipeline with zones: the zones the object is in now, possibly none.
    `sub_label` and `attributes` are set by a pipeline's cascade (see `pipeline.cascade`): what second
    models found on the object's crop; a detection without them publishes neither key.
    """

    label: str
    score: float
    box: tuple[float, float, float, float]  # x_min, y_min, x_max, y_max
    keypoints: tuple[Landmark, ...] = field(default=())
    track_id: str | None = None
    stationary: bool | None = None
    zones: tuple[str, ...] | None = None
    sub_label: SubLabel | None = None
    attributes: tuple[tuple[str, Attribute], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "label": self.label,
            "score": _round(self.score, 4),
            "box": [_round(v, 1) for v in self.box],
        }
        if self.keypoints:
            data["keypoints"] = [point.to_dict() for point in self.keypoints]
        if self.track_id is not None:
            data["track_id"] = self.track_id
            data["stationary"] = bool(self.stationary)
            if self.zones is not None:
                data["zones"] = list(self.zones)
        if self.sub_label is not None:
            data["sub_label"] = self.sub_label.to_dict()
        if self.attributes:
            data["attributes"] = attributes_dict(self.attributes)
        return data


def attributes_dict(attributes: tuple[tuple[str, Attribute], ...]) -> dict[str, Any]:
    """A detection's attributes as messages carry them: a score per class, a list of points per keypoint stage."""
    return {
        name: _round(value, 4) if isinstance(value, float) else [point.to_dict() for point in value]
        for name, value in attributes
    }


@dataclass(frozen=True)
class Detections(Decoded):
    """Objects found in one frame, best first."""

    task: ClassVar[str] = "detection"
    detections: tuple[Detection, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"detections": [d.to_dict() for d in self.detections]}

    @property
    def top_score(self) -> float:
        return max((d.score for d in self.detections), default=0.0)

    def signature(self) -> tuple[str, ...]:
        return tuple(sorted(d.label for d in self.detections))

    def scoring_at_least(self, min_score: float) -> Detections | None:
        """The detections scoring at least `min_score`: a prefix, since they are best first."""
        detections = self.detections
        kept = bisect.bisect_right(detections, -min_score, key=_negated_score)
        if kept == len(detections):
            return self if kept else None
        return Detections(detections[:kept]) if kept else None


@dataclass(frozen=True)
class ClassScore:
    label: str
    score: float


@dataclass(frozen=True)
class Classifications(Decoded):
    """The top classes of one input, best first."""

    task: ClassVar[str] = "classification"
    classes: tuple[ClassScore, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"classes": [{"label": c.label, "score": _round(c.score, 4)} for c in self.classes]}

    @property
    def top_score(self) -> float:
        return self.classes[0].score if self.classes else 0.0

    def signature(self) -> tuple[str, ...]:
        return (self.classes[0].label,) if self.classes else ()

    def scoring_at_least(self, min_score: float) -> Classifications | None:
        """The classes scoring at least `min_score`: a prefix, since they are best first."""
        classes = self.classes
        kept = bisect.bisect_right(classes, -min_score, key=_negated_score)
        if kept == len(classes):
            return self if kept else None
        return Classifications(classes[:kept]) if kept else None


@dataclass(frozen=True)
class ClassArea:
    label: str
    area: float  # fraction of the source image, 0..1


@dataclass(frozen=True)
class Segmentation(Decoded):
    """Which classes cover how much of the picture; the mask itself travels beside the message.

    `mask_png` is the class-index mask at source size (pixel value = class index) as PNG bytes, kept out
    of `to_dict` so the JSON message stays small; the publisher may send it on a topic of its own.
    """

    task: ClassVar[str] = "segmentation"
    classes: tuple[ClassArea, ...] = ()
    mask_png: bytes | None = None
    mask_size: tuple[int, int] | None = None  # (width, height) of the PNG

    def to_dict(self) -> dict[str, Any]:
        summary: dict[str, Any] = {"classes": [{"label": c.label, "area": _round(c.area, 4)} for c in self.classes]}
        if self.mask_png is not None and self.mask_size is not None:
            summary["mask"] = {"width": self.mask_size[0], "height": self.mask_size[1], "format": "png"}
        return {"segmentation": summary}

    @property
    def top_score(self) -> None:
        return None

    def signature(self) -> tuple[str, ...]:
        return tuple(sorted(c.label for c in self.classes))


@dataclass(frozen=True)
class Keypoints(Decoded):
    """One set of named keypoints (a pose, a face's landmarks); `top_score` is their mean score."""

    task: ClassVar[str] = "keypoints"
    keypoints: tuple[Keypoint, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"keypoints": [k.to_dict() for k in self.keypoints]}

    @property
    def top_score(self) -> float:
        if not self.keypoints:
            return 0.0
        return sum(k.score for k in self.keypoints) / len(self.keypoints)

    def signature(self) -> tuple[str, ...]:
        return tuple(sorted(k.name for k in self.keypoints))


@dataclass(frozen=True)
class Anomaly(Decoded):
    task: ClassVar[str] = "anomaly"
    score: float
    threshold: float

    @property
    def anomalous(self) -> bool:
        return self.score > self.threshold

    def to_dict(self) -> dict[str, Any]:
        return {"score": _json_number(self.score, 4), "anomalous": self.anomalous}

    @property
    def top_score(self) -> float:
        return self.score

    def signature(self) -> tuple[str, ...]:
        return ("anomalous",) if self.anomalous else ("normal",)


@dataclass(frozen=True)
class Regression(Decoded):
    """Named values; `resolution` is the step below which a change is not news (None: 3 significant digits)."""

    task: ClassVar[str] = "regression"
    values: tuple[tuple[str, float], ...]
    resolution: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"values": {name: _json_number(value, 6) for name, value in self.values}}

    @property
    def top_score(self) -> None:
        return None

    def signature(self) -> tuple[str, ...]:
        resolution = self.resolution
        if resolution is None:
            return tuple(f"{name}={value:.3g}" for name, value in self.values)
        return tuple(
            f"{name}={round(value / resolution) if math.isfinite(value) else value}" for name, value in self.values
        )


@dataclass(frozen=True)
class RawTensor:
    name: str
    shape: tuple[int, ...]
    values: tuple[float | None, ...]  # the first values, flattened in C order; None where not finite
    truncated: bool


@dataclass(frozen=True)
class RawOutputs(Decoded):
    task: ClassVar[str] = "raw"
    tensors: tuple[RawTensor, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "outputs": {
                t.name: {"shape": list(t.shape), "values": list(t.values), "truncated": t.truncated}
                for t in self.tensors
            }
        }

    @property
    def top_score(self) -> None:
        return None

    def signature(self) -> tuple[str, ...]:
        text = json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)
        return (hashlib.sha256(text.encode()).hexdigest()[:16],)
