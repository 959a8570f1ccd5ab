"""The metrics themselves, on cases small enough to count by hand."""

from __future__ import annotations

import pytest
from mot_metrics import evaluate

A = (0.0, 0.0, 10.0, 10.0)
B = (100.0, 0.0, 110.0, 10.0)
NEAR_A = (1.0, 0.0, 11.0, 10.0)  # IoU with A: 9/11


def test_a_perfect_tracker_scores_one() -> None:
    result = evaluate([({1: A, 2: B}, {"a": A, "b": B})] * 10)
    assert (result.mota, result.idf1, result.id_switches) == (1.0, 1.0, 0)


def test_two_ids_swapped_halfway() -> None:
    frames = [({1: A, 2: B}, {"a": A, "b": B})] * 5 + [({1: A, 2: B}, {"a": B, "b": A})] * 5
    result = evaluate(frames)
    assert result.id_switches == 2
    assert result.mota == pytest.approx(1 - 2 / 20)
    assert result.idf1 == pytest.approx(0.5)  # each truth keeps its best hypothesis for half the frames


def test_misses_and_false_positives_count_against_mota_and_idf1() -> None:
    frames = [({1: A}, {"a": A, "ghost": B})] * 4 + [({1: A}, {})] * 6
    result = evaluate(frames)
    assert (result.misses, result.false_positives, result.matches) == (6, 4, 4)
    assert result.mota == pytest.approx(1 - 10 / 10)
    assert result.idf1 == pytest.approx(2 * 4 / (10 + 8))


def test_a_match_too_loose_is_a_miss_and_a_false_positive() -> None:
    result = evaluate([({1: A}, {"a": (5.0, 0.0, 15.0, 10.0)})])  # IoU 1/3
    assert (result.matches, result.misses, result.false_positives) == (0, 1, 1)


def test_a_kept_match_is_not_reassigned_to_a_better_overlap() -> None:
    # Truth 1 is matched to "a"; when "b" overlaps it better but "a" still overlaps enough, CLEAR keeps "a".
    frames = [({1: A}, {"a": A}), ({1: A}, {"a": NEAR_A, "b": A})]
    result = evaluate(frames)
    assert (result.id_switches, result.false_positives) == (0, 1)


def test_a_switch_is_counted_against_the_latest_match_even_after_a_gap() -> None:
    frames = [({1: A}, {"a": A}), ({1: A}, {}), ({1: A}, {"b": A})]
    result = evaluate(frames)
    assert result.id_switches == 1 and result.misses == 1
    assert result.switches_per_1000 == pytest.approx(1000 / 3)
