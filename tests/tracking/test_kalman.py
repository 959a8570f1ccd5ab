"""The filter steps by seconds: the same motion sampled at any rate, or irregularly, gives the same velocity."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from edge_runtime.tracking.kalman import (
    CROSS,
    GATE_95,
    POSITION,
    RATE,
    ConstantVelocityFilter,
    boxes_from_states,
    measurements_from_boxes,
)


def box_at(t: float, speed: float = 100.0) -> np.ndarray:
    """A 50×120 box whose left edge moves right at `speed` px/s from x = 100."""
    x = 100.0 + speed * t
    return np.array([[x, 200.0, x + 50.0, 320.0]])


def follow(times: list[float], speed: float = 100.0) -> tuple[np.ndarray, np.ndarray, ConstantVelocityFilter]:
    motion = ConstantVelocityFilter()
    means, spreads = motion.initiate(box_at(times[0], speed))
    for previous, now in itertools.pairwise(times):
        means, spreads = motion.predict(means, spreads, now - previous)
        means, spreads = motion.update(means, spreads, box_at(now, speed))
    return means, spreads, motion


def test_boxes_and_measurements_convert_both_ways() -> None:
    boxes = np.array([[10.0, 20.0, 50.0, 100.0], [0.0, 0.0, 1.0, 3.0]])
    measured = measurements_from_boxes(boxes)
    assert measured.tolist() == [[30.0, 60.0, 40.0, 80.0], [0.5, 1.5, 1.0, 3.0]]
    states = np.concatenate([measured, np.zeros((2, 4))], axis=1)
    assert np.allclose(boxes_from_states(states), boxes)


@pytest.mark.parametrize("fps", [5, 10, 30])
def test_the_velocity_is_in_pixels_per_second_whatever_the_frame_rate(fps: int) -> None:
    means, _, _ = follow([i / fps for i in range(4 * fps)])
    assert means[0, 4] == pytest.approx(100.0, abs=3.0)
    assert abs(means[0, 5]) < 3.0


def test_irregular_intervals_predict_where_the_object_really_is() -> None:
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.uniform(0.05, 0.5, 20)).tolist()
    means, spreads, motion = follow(times)
    later = times[-1] + 0.8  # an interval unlike any before it
    predicted, _ = motion.predict(means, spreads, 0.8)
    truth = measurements_from_boxes(box_at(later))
    assert np.abs(predicted[0, :4] - truth[0]).max() < 4.0
    # One step per frame regardless of time would have put it 0.8 s × 100 px/s short or far off.
    assert np.abs(predicted[0, 0] - means[0, 0]) == pytest.approx(80.0, abs=4.0)


def test_uncertainty_grows_with_elapsed_time_and_object_size() -> None:
    motion = ConstantVelocityFilter()
    small_and_large = np.array([[0.0, 0.0, 20.0, 40.0], [0.0, 0.0, 200.0, 400.0]])
    means, spreads = motion.initiate(small_and_large)
    _, short = motion.predict(means, spreads, 0.1)
    _, long = motion.predict(means, spreads, 1.0)
    assert (long[:, POSITION] > short[:, POSITION]).all() and (long[:, RATE] > short[:, RATE]).all()
    assert (short[1, POSITION] > 50 * short[0, POSITION]).all()  # ten times the size, a hundred times the variance


def full_covariance(spread: np.ndarray) -> np.ndarray:
    """The 8×8 covariance that a spread's four 2×2 blocks stand for."""
    covariance = np.zeros((8, 8))
    for i in range(4):
        covariance[i, i], covariance[i + 4, i + 4] = spread[POSITION, i], spread[RATE, i]
        covariance[i, i + 4] = covariance[i + 4, i] = spread[CROSS, i]
    return covariance


def random_state(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    means = np.concatenate([[[300.0, 200.0, 40.0, 100.0]], rng.normal(0, 20, (1, 4))], axis=1)
    spreads = np.zeros((1, 3, 4))
    for i in range(4):
        root = rng.normal(0, 3, (2, 2))
        block = root @ root.T + np.eye(2)
        spreads[0, POSITION, i], spreads[0, CROSS, i], spreads[0, RATE, i] = block[0, 0], block[0, 1], block[1, 1]
    return means, spreads


def test_the_prediction_is_the_textbook_one() -> None:
    """x' = F x and P' = F P Fᵀ + Q, with Q the white-acceleration noise q·[[dt³/3, dt²/2], [dt²/2, dt]]."""
    motion = ConstantVelocityFilter(acceleration=1.5, size_acceleration=0.5)
    means, spreads = random_state(np.random.default_rng(2))
    dt = 0.37
    transition = np.eye(8)
    transition[:4, 4:] = dt * np.eye(4)
    q = np.array([1.5 * 100, 1.5 * 100, 0.5 * 40, 0.5 * 100]) ** 2  # position by the larger side
    noise = np.block([[np.diag(q * dt**3 / 3), np.diag(q * dt**2 / 2)], [np.diag(q * dt**2 / 2), np.diag(q * dt)]])
    predicted, spread = motion.predict(means, spreads, dt)
    assert np.allclose(predicted[0], transition @ means[0])
    covariance = full_covariance(spreads[0])
    assert np.allclose(full_covariance(spread[0]), transition @ covariance @ transition.T + noise)


def test_the_update_is_the_textbook_one() -> None:
    """K = P Hᵀ (H P Hᵀ + R)⁻¹, x' = x + K (z - H x), P' = (I - K H) P, with R = diag((0.05 · size)²)."""
    motion = ConstantVelocityFilter()
    means, spreads = random_state(np.random.default_rng(6))
    box = np.array([[285.0, 155.0, 322.0, 262.0]])
    corrected, spread = motion.update(means, spreads, box)
    covariance = full_covariance(spreads[0])
    observe = np.hstack([np.eye(4), np.zeros((4, 4))])
    noise = np.diag((0.05 * np.array([40.0, 100.0, 40.0, 100.0])) ** 2)
    gain = covariance @ observe.T @ np.linalg.inv(observe @ covariance @ observe.T + noise)
    expected = means[0] + gain @ (measurements_from_boxes(box)[0] - observe @ means[0])
    assert np.allclose(corrected[0], expected)
    assert np.allclose(full_covariance(spread[0]), (np.eye(8) - gain @ observe) @ covariance)


def test_no_elapsed_time_changes_nothing() -> None:
    motion = ConstantVelocityFilter()
    means, spreads = motion.initiate(box_at(0.0))
    means[:, 4] = 100.0
    same_means, same_spreads = motion.predict(means, spreads, 0.0)
    assert np.array_equal(same_means, means) and np.array_equal(same_spreads, spreads)


def test_many_tracks_at_once_equal_each_alone() -> None:
    rng = np.random.default_rng(7)
    motion = ConstantVelocityFilter()
    starts = np.array([[10.0, 10.0, 60.0, 130.0], [300.0, 200.0, 500.0, 300.0], [600.0, 50.0, 620.0, 90.0]])
    measured = starts + rng.normal(0, 3, starts.shape) + np.array([12.0, 1.0, 12.0, 1.0])
    means, spreads = motion.initiate(starts)
    means, spreads = motion.predict(means, spreads, 0.2)
    together = motion.update(means, spreads, measured)
    for row in range(3):
        alone = motion.update(means[row : row + 1], spreads[row : row + 1], measured[row : row + 1])
        assert np.allclose(alone[0][0], together[0][row]) and np.allclose(alone[1][0], together[1][row])


def test_an_update_pulls_the_state_towards_the_measurement_and_shrinks_the_spread() -> None:
    motion = ConstantVelocityFilter()
    means, spreads = motion.initiate(box_at(0.0))
    means, spreads = motion.predict(means, spreads, 0.5)
    measured = box_at(0.5)
    corrected, tighter = motion.update(means, spreads, measured)
    target = measurements_from_boxes(measured)[0, 0]
    assert means[0, 0] < corrected[0, 0] < target
    assert tighter[0, POSITION, 0] < spreads[0, POSITION, 0]
    assert corrected[0, 4] > 0  # it learnt that the object moves right


def test_the_gate_trusts_a_steady_track_more_than_a_new_one() -> None:
    steady_means, steady_spreads, motion = follow([i / 10 for i in range(30)])
    steady_means, steady_spreads = motion.predict(steady_means, steady_spreads, 0.1)
    new_means, new_spreads = motion.initiate(box_at(2.9))
    new_means, new_spreads = motion.predict(new_means, new_spreads, 0.1)
    on_course, off_course = box_at(3.0), box_at(3.0) + np.array([[60.0, 0.0, 60.0, 0.0]])
    steady = motion.gating_distance(steady_means, steady_spreads, np.concatenate([on_course, off_course]))
    new = motion.gating_distance(new_means, new_spreads, off_course)
    assert steady[0, 0] < GATE_95 < steady[0, 1]
    assert new[0, 0] < steady[0, 1]
    assert motion.gating_distance(steady_means, steady_spreads, np.zeros((0, 4))).shape == (1, 0)


def test_in_place_steps_on_a_column_major_table_give_what_the_copying_ones_give() -> None:
    rng = np.random.default_rng(11)
    motion = ConstantVelocityFilter()
    starts = rng.uniform(0, 500, (7, 2))
    boxes = np.concatenate([starts, starts + rng.uniform(20, 150, (7, 2))], axis=1)
    means, spreads = motion.initiate(boxes)
    assert means.flags.f_contiguous and spreads.flags.f_contiguous
    for dt in (0.1, 0.1, 0.25, 0.0, 1.0):
        expected_means, expected_spreads = motion.predict(
            np.ascontiguousarray(means), np.ascontiguousarray(spreads), dt
        )
        spreads = motion.predict_in_place(means, spreads, dt)
        assert np.array_equal(means, expected_means)
        # The spreads' products are grouped differently for the two layouts: a BLAS kernel may round them
        # differently in the last bit, never by more.
        assert np.allclose(spreads, expected_spreads, rtol=1e-14, atol=0.0)
        measured = boxes + rng.normal(0, 3, boxes.shape)
        expected_means, expected_spreads = motion.update(means, spreads, measured)
        motion.update_in_place(means, spreads, measurements_from_boxes(measured))
        assert np.array_equal(means, expected_means) and np.array_equal(spreads, expected_spreads)


def test_rows_left_out_of_an_update_keep_their_states_whatever_their_measurement() -> None:
    motion = ConstantVelocityFilter()
    starts = np.array([[10.0, 10.0, 60.0, 130.0], [300.0, 200.0, 500.0, 300.0], [600.0, 50.0, 620.0, 90.0]])
    means, spreads = motion.initiate(starts)
    spreads = motion.predict_in_place(means, spreads, 0.2)
    measured = measurements_from_boxes(starts + 5.0)
    measured[1] = np.nan  # a missed track's row holds whatever detection came last
    expected_means, expected_spreads = motion.update(means[[0, 2]], spreads[[0, 2]], starts[[0, 2]] + 5.0)
    kept_means, kept_spreads = means[1].copy(), spreads[1].copy()
    motion.update_in_place(means, spreads, measured, np.array([True, False, True]))
    assert np.array_equal(means[1], kept_means) and np.array_equal(spreads[1], kept_spreads)
    assert np.array_equal(means[[0, 2]], expected_means) and np.array_equal(spreads[[0, 2]], expected_spreads)
