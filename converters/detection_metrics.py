"""Average precision of detections against annotated boxes, the way COCO scores it, at one IoU threshold.

Per class, every detection over all images is ranked by score and matched greedily to the unmatched
ground-truth box it overlaps most (IoU at or above the threshold); the precision/recall curve is made
monotone and read at 101 recall points (0, 0.01, ... 1), and AP is their mean. Crowd boxes
(`iscrowd`) are neither hits nor misses: a detection on one is ignored, one left undetected costs
nothing, and their overlap is measured against the detection's own area, as COCO does. mAP is the
mean AP over the classes that have at least one ground-truth box; a class that is only ever detected
has no recall to measure, so it does not enter the mean. Like COCO, at most 100 detections per image
and class count, the best-scored ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

RECALL_POINTS = np.linspace(0.0, 1.0, 101)
MAX_DETECTIONS_PER_CLASS = 100


@dataclass(frozen=True)
class Box:
    """One box in image pixels, corners (x_min, y_min, x_max, y_max)."""

    label: str
    corners: tuple[float, float, float, float]
    score: float = 1.0  # detections only
    crowd: bool = False  # ground truth only


@dataclass(frozen=True)
class DetectionAccuracy:
    map50: float  # mean AP at IoU 0.5 over the classes with ground truth, 0..1
    per_class: dict[str, float] = field(default_factory=dict)  # AP at IoU 0.5 per class with ground truth
    images: int = 0
    objects: int = 0  # ground-truth boxes that count (crowd boxes excluded)


@dataclass
class _Ranked:
    """One class's detections over all images: score, and whether each was a hit, a miss or ignored."""

    scores: list[float] = field(default_factory=list)
    hits: list[bool] = field(default_factory=list)
    ignored: list[bool] = field(default_factory=list)
    objects: int = 0


def mean_average_precision(
    truths: Sequence[Sequence[Box]], detections: Sequence[Sequence[Box]], iou_threshold: float = 0.5
) -> DetectionAccuracy:
    """AP per class and their mean over a set of images; `truths[i]` and `detections[i]` belong to image i."""
    if len(truths) != len(detections):
        raise ValueError(f"{len(truths)} images of ground truth but {len(detections)} of detections")
    classes = sorted({box.label for boxes in truths for box in boxes if not box.crowd})
    ranked = {label: _Ranked() for label in classes}
    for image_truth, image_detections in zip(truths, detections, strict=True):
        for label in classes:
            _match_image(
                [b for b in image_truth if b.label == label],
                [b for b in image_detections if b.label == label],
                iou_threshold,
                ranked[label],
            )
    per_class = {label: average_precision(ranked[label]) for label in classes}
    mean = float(np.mean(list(per_class.values()))) if per_class else 0.0
    return DetectionAccuracy(mean, per_class, len(truths), sum(r.objects for r in ranked.values()))


def _match_image(truth: list[Box], found: list[Box], iou_threshold: float, into: _Ranked) -> None:
    """Greedy matching in score order: each detection takes the free box it overlaps most, ordinary boxes first."""
    truth = sorted(truth, key=lambda b: b.crowd)  # stable: ordinary boxes first, then crowd regions
    order = sorted(range(len(found)), key=lambda i: -found[i].score)[:MAX_DETECTIONS_PER_CLASS]
    found = [found[i] for i in order]
    into.objects += sum(not b.crowd for b in truth)
    overlaps = iou_matrix(found, truth)
    taken = [False] * len(truth)
    for d, detection in enumerate(found):
        best, best_iou = -1, min(iou_threshold, 1 - 1e-10)
        for t, box in enumerate(truth):
            if taken[t] and not box.crowd:
                continue
            if best > -1 and not truth[best].crowd and box.crowd:
                break  # a hit on an ordinary box is not traded for a crowd region
            if overlaps[d, t] < best_iou:
                continue
            best, best_iou = t, overlaps[d, t]
        if best > -1:
            taken[best] = True
        into.scores.append(detection.score)
        into.hits.append(best > -1)
        into.ignored.append(best > -1 and truth[best].crowd)


def iou_matrix(detections: Sequence[Box], truth: Sequence[Box]) -> np.ndarray:
    """IoU of every detection with every box; for crowd boxes, the overlap over the detection's own area."""
    result = np.zeros((len(detections), len(truth)))
    if not detections or not truth:
        return result
    d = np.asarray([b.corners for b in detections], np.float64)
    t = np.asarray([b.corners for b in truth], np.float64)
    width = np.clip(np.minimum(d[:, None, 2], t[None, :, 2]) - np.maximum(d[:, None, 0], t[None, :, 0]), 0, None)
    height = np.clip(np.minimum(d[:, None, 3], t[None, :, 3]) - np.maximum(d[:, None, 1], t[None, :, 1]), 0, None)
    inter = width * height
    area_d = (d[:, 2] - d[:, 0]) * (d[:, 3] - d[:, 1])
    area_t = (t[:, 2] - t[:, 0]) * (t[:, 3] - t[:, 1])
    crowd = np.asarray([b.crowd for b in truth])
    union = np.where(crowd[None, :], area_d[:, None], area_d[:, None] + area_t[None, :] - inter)
    np.divide(inter, union, out=result, where=union > 0)
    return result


def average_precision(ranked: _Ranked) -> float:
    """Area under the interpolated precision/recall curve, sampled at 101 recall points."""
    if ranked.objects == 0 or not ranked.scores:
        return 0.0
    order = np.argsort(-np.asarray(ranked.scores, np.float64), kind="mergesort")
    counted = ~np.asarray(ranked.ignored, bool)[order]
    hits = np.asarray(ranked.hits, bool)[order]
    true_positives = np.cumsum(hits & counted)
    false_positives = np.cumsum(~hits & counted)
    recall = true_positives / ranked.objects
    precision = true_positives / np.maximum(true_positives + false_positives, np.finfo(np.float64).eps)
    precision = np.maximum.accumulate(precision[::-1])[::-1]  # best precision at this recall or beyond
    at = np.searchsorted(recall, RECALL_POINTS, side="left")
    reached = at < len(precision)  # recall points beyond the last detection's recall score 0
    return float(np.where(reached, precision[np.minimum(at, len(precision) - 1)], 0.0).mean())
