"""Which detections reach the tracker: labels, masks by the bottom centre, areas and ratios, weak scores."""

from __future__ import annotations

from typing import Any

import numpy as np

from edge_runtime.tracking.config import TrackConfig
from edge_runtime.tracking.filters import DetectionFilter, inside_polygon

FRAME = (1000, 500)


def admit(config: dict[str, Any], rows: list[tuple[str, float, tuple[float, ...]]], frame=FRAME) -> list[bool]:
    labels = [label for label, _, _ in rows]
    scores = np.array([score for _, score, _ in rows])
    boxes = np.array([box for _, _, box in rows], dtype=np.float64)
    return DetectionFilter(TrackConfig.model_validate(config)).admit(labels, boxes, scores, frame).tolist()


def test_inside_a_convex_and_a_concave_polygon() -> None:
    square = np.array([[0.2, 0.2], [0.6, 0.2], [0.6, 0.6], [0.2, 0.6]])
    points = np.array([[0.4, 0.4], [0.1, 0.4], [0.7, 0.3], [0.4, 0.65]])
    assert inside_polygon(points, square).tolist() == [True, False, False, False]
    ell = np.array([[0.0, 0.0], [0.5, 0.0], [0.5, 0.2], [0.2, 0.2], [0.2, 0.5], [0.0, 0.5]])  # an L
    points = np.array([[0.1, 0.1], [0.4, 0.1], [0.1, 0.4], [0.4, 0.4]])
    assert inside_polygon(points, ell).tolist() == [True, True, True, False]


def test_a_mask_ignores_objects_standing_in_it_not_objects_passing_in_front() -> None:
    # The lower half of the frame's left third is masked (a hedge that sways).
    mask = [[0.0, 0.5], [0.33, 0.5], [0.33, 1.0], [0.0, 1.0]]
    rows = [
        ("person", 0.9, (100.0, 300.0, 150.0, 450.0)),  # feet at (0.125, 0.9): in the hedge
        ("person", 0.9, (100.0, 50.0, 150.0, 200.0)),  # above the hedge, feet at (0.125, 0.4)
        ("person", 0.9, (300.0, 200.0, 400.0, 450.0)),  # box overlaps the mask, feet at (0.35, 0.9) outside
    ]
    assert admit({"masks": [mask]}, rows) == [False, True, True]
    assert admit({}, rows) == [True, True, True]


def test_areas_are_pixels_above_one_and_fractions_of_the_frame_otherwise() -> None:
    small, large = (0.0, 0.0, 20.0, 25.0), (0.0, 0.0, 200.0, 250.0)  # 500 px², 50 000 px²
    rows = [("car", 0.9, small), ("car", 0.9, large)]
    assert admit({"filters": {"default": {"min_area": 1000}}}, rows) == [False, True]
    assert admit({"filters": {"default": {"max_area": 1000}}}, rows) == [True, False]
    # 0.01 of a 1000×500 frame is 5000 px²; of a 100×50 frame 50 px², where both boxes pass.
    assert admit({"filters": {"default": {"min_area": 0.01}}}, rows) == [False, True]
    assert admit({"filters": {"default": {"min_area": 0.01}}}, rows, frame=(100, 50)) == [True, True]


def test_ratio_limits_apply_per_label() -> None:
    standing, lying = (0.0, 0.0, 50.0, 150.0), (0.0, 0.0, 150.0, 50.0)  # width/height 1/3 and 3
    rows = [("person", 0.9, standing), ("person", 0.9, lying), ("car", 0.9, standing), ("car", 0.9, lying)]
    config = {"labels": ["person", "car"], "filters": {"person": {"max_ratio": 1.0}, "car": {"min_ratio": 1.0}}}
    assert admit(config, rows) == [True, False, False, True]


def test_untracked_labels_and_scores_below_low_are_left_out() -> None:
    box = (0.0, 0.0, 50.0, 150.0)
    rows = [("person", 0.9, box), ("dog", 0.9, box), ("person", 0.05, box), ("person", 0.1, box)]
    assert admit({"labels": ["person"]}, rows) == [True, False, False, True]
    assert admit({}, rows) == [True, True, False, True]


def test_no_detections() -> None:
    assert admit({"masks": [[[0, 0], [1, 0], [1, 1]]]}, []) == []
