"""AP@0.5 and mAP on hand-made cases with known answers, and against pycocotools on random ones."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np
import pytest

from converters.detection_metrics import Box, iou_matrix, mean_average_precision

FACE = (10.0, 10.0, 50.0, 50.0)
OTHER_FACE = (100.0, 100.0, 140.0, 150.0)


def truth(*corners: tuple[float, float, float, float], label: str = "face") -> list[Box]:
    return [Box(label, c) for c in corners]


def found(*scored: tuple[tuple[float, float, float, float], float], label: str = "face") -> list[Box]:
    return [Box(label, c, score) for c, score in scored]


def test_perfect_detections_score_one() -> None:
    result = mean_average_precision(
        [truth(FACE, OTHER_FACE), truth(FACE)], [found((FACE, 0.9), (OTHER_FACE, 0.8)), found((FACE, 0.7))]
    )
    assert result.map50 == pytest.approx(1.0)
    assert result.per_class == {"face": pytest.approx(1.0)}
    assert (result.images, result.objects) == (2, 3)


def test_one_of_two_objects_missed_scores_the_recall_points_up_to_one_half() -> None:
    result = mean_average_precision([truth(FACE), truth(FACE)], [found((FACE, 0.9)), []])
    assert result.map50 == pytest.approx(51 / 101)  # precision 1 at recall 0, 0.01, ... 0.5; nothing beyond


def test_false_positive_ranked_first_halves_the_precision() -> None:
    result = mean_average_precision([truth(FACE), []], [found((FACE, 0.6)), found((FACE, 0.9))])
    assert result.map50 == pytest.approx(0.5)


def test_false_positive_ranked_after_every_hit_costs_nothing() -> None:
    result = mean_average_precision([truth(FACE), []], [found((FACE, 0.9)), found((FACE, 0.2))])
    assert result.map50 == pytest.approx(1.0)


def test_second_box_on_the_same_object_is_a_false_positive() -> None:
    shifted = (12.0, 12.0, 52.0, 52.0)
    assert mean_average_precision([truth(FACE)], [found((FACE, 0.9), (shifted, 0.8))]).map50 == pytest.approx(1.0)
    assert mean_average_precision([truth(FACE)], [found((shifted, 0.8), (FACE, 0.7))]).map50 == pytest.approx(1.0)
    two = mean_average_precision([truth(FACE, OTHER_FACE)], [found((FACE, 0.9), (shifted, 0.8), (OTHER_FACE, 0.7))])
    # ranked: hit, duplicate, hit -> precision 1 up to recall 0.5, 2/3 from there to recall 1
    assert two.map50 == pytest.approx((51 * 1.0 + 50 * 2 / 3) / 101)


def test_overlap_must_reach_one_half() -> None:
    half = (10.0, 10.0, 50.0, 30.0)  # half the face box: IoU exactly 0.5
    under = (10.0, 10.0, 50.0, 29.0)
    assert mean_average_precision([truth(FACE)], [found((half, 0.9))]).map50 == pytest.approx(1.0)
    assert mean_average_precision([truth(FACE)], [found((under, 0.9))]).map50 == 0.0


def test_a_box_of_another_class_does_not_count() -> None:
    result = mean_average_precision([truth(FACE)], [found((FACE, 0.9), label="cat")])
    assert result.map50 == 0.0
    assert result.per_class == {"face": 0.0}  # "cat" has no ground truth, so it has no AP and is not averaged


def test_map_is_the_mean_over_classes_with_ground_truth() -> None:
    truths = [[*truth(FACE), *truth(OTHER_FACE, label="cat")]]
    result = mean_average_precision(truths, [found((FACE, 0.9))])
    assert result.per_class == {"cat": 0.0, "face": pytest.approx(1.0)}
    assert result.map50 == pytest.approx(0.5)


def test_crowd_regions_are_neither_hits_nor_misses() -> None:
    crowd = Box("face", (200.0, 0.0, 400.0, 100.0), crowd=True)
    inside = (210.0, 10.0, 240.0, 40.0)  # small against the region, but wholly inside it
    assert mean_average_precision([[*truth(FACE), crowd]], [found((FACE, 0.8))]).map50 == pytest.approx(1.0)
    on_crowd = mean_average_precision([[*truth(FACE), crowd]], [found((inside, 0.9), (FACE, 0.8))])
    assert on_crowd.map50 == pytest.approx(1.0)
    assert on_crowd.objects == 1


def test_crowd_overlap_is_measured_against_the_detection() -> None:
    crowd = Box("face", (0.0, 0.0, 100.0, 100.0), crowd=True)
    ordinary = Box("face", (0.0, 0.0, 100.0, 100.0))
    detection = Box("face", (0.0, 0.0, 10.0, 10.0), 0.5)
    assert iou_matrix([detection], [crowd, ordinary]) == pytest.approx(np.array([[1.0, 0.01]]))


def test_no_detections_at_all_score_zero() -> None:
    assert mean_average_precision([truth(FACE), []], [[], []]).map50 == 0.0


def test_images_must_pair_up() -> None:
    with pytest.raises(ValueError, match="2 images of ground truth but 1"):
        mean_average_precision([truth(FACE), []], [[]])


def _random_image(rng: np.random.Generator, labels: list[str]) -> tuple[list[Box], list[Box]]:
    """Boxes, some crowd, and detections near them (some off, some duplicates), with tied scores."""
    gts: list[Box] = []
    for _ in range(rng.integers(0, 5)):
        x, y = rng.uniform(0, 300, 2)
        w, h = rng.uniform(10, 120, 2)
        gts.append(Box(str(rng.choice(labels)), (x, y, x + w, y + h), crowd=bool(rng.random() < 0.15)))
    dets: list[Box] = []
    for gt in gts:
        for _ in range(rng.integers(0, 3)):
            jitter = rng.normal(0, 6, 4)
            corners = tuple(float(v) for v in np.asarray(gt.corners) + jitter)
            x0, y0, x1, y1 = corners
            label = gt.label if rng.random() < 0.85 else str(rng.choice(labels))
            dets.append(Box(label, (x0, y0, max(x1, x0 + 1), max(y1, y0 + 1)), float(rng.integers(1, 20)) / 20))
    for _ in range(rng.integers(0, 3)):
        x, y = rng.uniform(0, 300, 2)
        w, h = rng.uniform(10, 120, 2)
        dets.append(Box(str(rng.choice(labels)), (x, y, x + w, y + h), float(rng.integers(1, 20)) / 20))
    return gts, dets


def _coco_ap50(truths: list[list[Box]], detections: list[list[Box]], labels: list[str]) -> dict[str, float]:
    """AP@0.5 per category as pycocotools' COCOeval computes it."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    ids = {label: i + 1 for i, label in enumerate(labels)}

    def xywh(box: Box) -> list[float]:
        x0, y0, x1, y1 = box.corners
        return [x0, y0, x1 - x0, y1 - y0]

    gt_anns: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for image_id, (gts, dets) in enumerate(zip(truths, detections, strict=True), start=1):
        for box in gts:
            w, h = xywh(box)[2:]
            gt_anns.append(
                {
                    "id": len(gt_anns) + 1,
                    "image_id": image_id,
                    "category_id": ids[box.label],
                    "bbox": xywh(box),
                    "area": w * h,
                    "iscrowd": int(box.crowd),
                }
            )
        results += [
            {"image_id": image_id, "category_id": ids[b.label], "bbox": xywh(b), "score": b.score} for b in dets
        ]
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = {
            "images": [{"id": i, "width": 500, "height": 500} for i in range(1, len(truths) + 1)],
            "annotations": gt_anns,
            "categories": [{"id": i, "name": label} for label, i in ids.items()],
        }
        coco.createIndex()
        evaluation = COCOeval(coco, coco.loadRes(results), "bbox")
        evaluation.params.iouThrs = np.array([0.5])
        evaluation.evaluate()
        evaluation.accumulate()
    precision = evaluation.eval["precision"][0, :, :, 0, -1]  # recall points x categories, all areas, 100 dets
    return {label: float(precision[:, i - 1].mean()) for label, i in ids.items() if precision[0, i - 1] > -1}


@pytest.mark.parametrize("seed", range(12))
def test_agrees_with_pycocotools_on_random_scenes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = ["face", "cat", "car"][: 1 + seed % 3]
    scenes = [_random_image(rng, labels) for _ in range(int(rng.integers(3, 9)))]
    truths, detections = [s[0] for s in scenes], [s[1] for s in scenes]
    if not any(detections):
        detections[0] = [Box(labels[0], (0.0, 0.0, 20.0, 20.0), 0.5)]
    expected = _coco_ap50(truths, detections, labels)
    result = mean_average_precision(truths, detections)
    assert result.per_class == pytest.approx(expected, abs=1e-9)
    if expected:
        assert result.map50 == pytest.approx(float(np.mean(list(expected.values()))), abs=1e-9)
