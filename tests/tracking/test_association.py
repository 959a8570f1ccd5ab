"""Overlap, Frigate's relative distance, and the least-cost assignment with a cost limit."""

from __future__ import annotations

import math

import lap
import numpy as np
import pytest

from edge_runtime.tracking.association import (
    FORBIDDEN,
    any_within_relative_distance,
    assign,
    iou_matrix,
    paired_iou,
    relative_distance_matrix,
)


def frigate_distance(detection: tuple[float, ...], estimate: tuple[float, ...]) -> float:
    """Frigate's `distance` for one pair, written out from its definition."""
    estimate_w, estimate_h = estimate[2] - estimate[0], estimate[3] - estimate[1]
    detection_w, detection_h = detection[2] - detection[0], detection[3] - detection[1]
    dx = ((detection[0] + detection[2]) / 2 - (estimate[0] + estimate[2]) / 2) / estimate_w
    dy = (detection[3] - estimate[3]) / estimate_h
    width_change = max(estimate_w, detection_w) / min(estimate_w, detection_w) - 1
    height_change = max(estimate_h, detection_h) / min(estimate_h, detection_h) - 1
    return math.sqrt(dx**2 + dy**2 + width_change**2 + height_change**2)


def test_iou_of_known_pairs() -> None:
    first = np.array([[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 10.0, 10.0]])
    second = np.array([[0.0, 0.0, 10.0, 10.0], [5.0, 0.0, 15.0, 10.0], [20.0, 20.0, 30.0, 30.0]])
    assert np.allclose(iou_matrix(first, second), [[1.0, 1 / 3, 0.0], [1.0, 1 / 3, 0.0]])
    assert np.allclose(paired_iou(first, second[:2]), [1.0, 1 / 3])
    assert iou_matrix(first, np.zeros((0, 4))).shape == (2, 0)
    assert iou_matrix(np.zeros((0, 4)), second).shape == (0, 3)
    degenerate = np.array([[5.0, 5.0, 5.0, 5.0]])
    assert iou_matrix(degenerate, degenerate).tolist() == [[0.0]]


def test_relative_distance_is_frigates() -> None:
    rng = np.random.default_rng(11)
    corners = rng.uniform(0, 500, (7, 2))
    estimates = np.concatenate([corners, corners + rng.uniform(10, 200, (7, 2))], axis=1)
    detections = estimates[[0, 3, 5]] + rng.normal(0, 15, (3, 4))
    matrix = relative_distance_matrix(estimates, detections)
    expected = [[frigate_distance(tuple(d), tuple(e)) for d in detections] for e in estimates]
    assert np.allclose(matrix, expected)


def test_relative_distance_counts_in_object_sizes() -> None:
    estimate = np.array([[100.0, 100.0, 150.0, 220.0]])  # 50 wide, 120 tall
    moved_one_width = np.array([[150.0, 100.0, 200.0, 220.0]])
    grown_twice_as_wide = np.array([[75.0, 100.0, 175.0, 220.0]])  # same bottom centre
    assert relative_distance_matrix(estimate, moved_one_width)[0, 0] == pytest.approx(1.0)
    assert relative_distance_matrix(estimate, grown_twice_as_wide)[0, 0] == pytest.approx(1.0)
    assert relative_distance_matrix(estimate, estimate)[0, 0] == 0.0


def test_python_check_for_a_near_pair_agrees_with_the_matrix() -> None:
    """Every finite distance is the matrix's to the bit, so on each side of the limit the answer is the
    matrix's; a NaN or infinite coordinate may make it answer True, never False where the matrix has a pair."""
    rng = np.random.default_rng(5)
    odd = [np.nan, np.inf, -np.inf, 0.0, 1e-9]
    agreed = near = 0
    for _ in range(3000):
        estimates = rng.uniform(0, 400, (int(rng.integers(1, 4)), 4))
        estimates[:, 2:] += rng.choice([0.0, 1e-7, 30.0, 120.0], (len(estimates), 2))
        detections = estimates[rng.integers(0, len(estimates), int(rng.integers(1, 4)))]
        detections = detections + rng.normal(0, rng.choice([1.0, 40.0, 200.0]), detections.shape)
        if rng.random() < 0.1:
            detections[rng.integers(len(detections)), rng.integers(4)] = rng.choice(odd)
        matrix = relative_distance_matrix(estimates, detections)
        # The matrix's own distances as limits: pairs exactly at the limit must count as within it.
        for limit in (2.5, float(np.nanmin(np.where(np.isinf(matrix), np.nan, matrix), initial=2.5))):
            expected = bool(np.count_nonzero(matrix <= limit))
            found = any_within_relative_distance(estimates, detections, limit)
            if np.isfinite(matrix).all():
                assert found == expected
                agreed += 1
            else:
                assert found or not expected
            near += expected
    assert agreed > 4000 and 1000 < near < agreed


def test_assignment_minimises_the_total_not_each_pick() -> None:
    # Taking the cheapest pair first (0-0) would leave 1-1 at 0.9; the best total pairs them crosswise.
    cost = np.array([[0.1, 0.2], [0.15, 0.9]])
    result = assign(cost, limit=1.0)
    assert result.rows.tolist() == [0, 1] and result.columns.tolist() == [1, 0]
    assert result.unmatched_rows.tolist() == [] and result.unmatched_columns.tolist() == []


def test_nothing_above_the_limit_is_paired() -> None:
    cost = np.array([[0.2, 0.8, FORBIDDEN], [0.9, 0.95, FORBIDDEN], [FORBIDDEN, FORBIDDEN, 0.3]])
    result = assign(cost, limit=0.7)
    assert list(zip(result.rows.tolist(), result.columns.tolist(), strict=True)) == [(0, 0), (2, 2)]
    assert result.unmatched_rows.tolist() == [1] and result.unmatched_columns.tolist() == [1]


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0)])
def test_empty_sides_leave_everything_unmatched(shape: tuple[int, int]) -> None:
    result = assign(np.zeros(shape), limit=0.5)
    assert len(result.rows) == 0
    assert result.unmatched_rows.tolist() == list(range(shape[0]))
    assert result.unmatched_columns.tolist() == list(range(shape[1]))


def test_rectangular_and_larger_problems_match_brute_force_totals() -> None:
    rng = np.random.default_rng(5)
    for _ in range(20):
        cost = rng.uniform(0, 1, (4, 6))
        result = assign(cost, limit=0.6)
        chosen = cost[result.rows, result.columns]
        assert (chosen <= 0.6).all()
        assert len(set(result.columns.tolist())) == len(result.columns)
        # Optimal with the limit: brute force over every partial matching of 4 rows into 6 columns.
        best = _best_total(cost, 0.6)
        # An unmatched pair costs the limit (half for each side, as LAPJV's extension counts it).
        total = chosen.sum() + 0.6 * (4 - len(chosen))
        assert total == pytest.approx(best)


def test_pairs_without_rivals_are_taken_directly_and_the_rest_solved_as_a_whole() -> None:
    rng = np.random.default_rng(8)
    for _ in range(20):
        # Tracking-like: most tracks overlap one detection only, a few are contested, some have none.
        cost = np.ones((30, 32))
        cost[np.arange(30), rng.permutation(32)[:30]] = rng.uniform(0, 0.5, 30)
        rivals = rng.integers(0, 30, (8, 2))
        cost[rivals[:, 0], rivals[:, 1]] = rng.uniform(0, 0.7, 8)
        result = assign(cost, limit=0.7)
        _, row_to_column, _ = lap.lapjv(cost, extend_cost=True, cost_limit=0.7)
        whole = [(r, c) for r, c in enumerate(row_to_column.tolist()) if c >= 0]
        unpaired = 62 - 2 * len(result.rows)
        assert cost[result.rows, result.columns].sum() + 0.35 * unpaired == pytest.approx(
            sum(cost[r, c] for r, c in whole) + 0.35 * (62 - 2 * len(whole))
        )


def _best_total(cost: np.ndarray, limit: float) -> float:
    from itertools import permutations

    rows, columns = cost.shape
    best = math.inf
    padded = np.concatenate([np.minimum(cost, limit), np.full((rows, rows), limit)], axis=1)
    for choice in permutations(range(columns + rows), rows):
        best = min(best, sum(padded[r, c] for r, c in enumerate(choice)))
    return float(best)
