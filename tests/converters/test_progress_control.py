"""Accuracy control's time left, from NNCF's loop as its log lines and validation calls show it."""

from __future__ import annotations

import itertools

import pytest
from accuracy_control_runs import RUNS, RecordedRun

from converters.progress_control import ControlPace, expected_evaluations


def _nncf_loop(cap: int, groups: int, worse: list[bool]) -> int:
    """Evaluations NNCF's loop makes after ranking, where revert k made the drop worse when `worse[k - 1]`:
    a transcription of `QuantizationAccuracyRestorer._apply`, its cap's last revert not measured."""
    evaluations, remaining, step_back = 0, groups, True
    for iteration in range(1, cap + 1):
        remaining -= 1  # the top group reverted
        if iteration == cap:
            break
        evaluations += 1
        if not worse[iteration - 1] or step_back:
            step_back = False
            continue
        remaining += 1  # undone, and every remaining group ranked again
        evaluations += remaining
        step_back = True
    return evaluations


@pytest.mark.parametrize(("cap", "groups", "p"), [(5, 10, 0.5), (6, 9, 0.3), (4, 4, 0.8), (1, 3, 0.5)])
def test_the_expected_evaluations_weigh_every_path_of_nncf_loop_by_its_chance(cap: int, groups: int, p: float) -> None:
    expected = 0.0
    for worse in itertools.product([False, True], repeat=cap):
        chance = 1.0
        for w in worse[1:]:  # the first revert is kept whatever it measures: its outcome costs nothing
            chance *= p if w else 1 - p
        expected += chance / 2 * _nncf_loop(cap, groups, list(worse))
    first = 1.0 if cap > 1 else 0.0  # the first revert's measurement, before the decision the estimate starts at
    assert first + expected_evaluations(cap, 1, 0, groups, True, p) == pytest.approx(expected)


def test_the_expected_evaluations_at_the_extremes() -> None:
    # Never worse: the reverts after the first are measured, the cap's last is not.
    assert expected_evaluations(5, 1, 0, 10, False, 0.0) == 3.0
    # Always worse: revert 1 undone and 10 groups ranked again, 2 kept whatever, 3 undone and 9 ranked, 4 kept.
    assert expected_evaluations(5, 1, 0, 10, False, 1.0) == 10 + 1 + 1 + 9 + 1
    assert expected_evaluations(5, 5, 2, 10, False, 1.0) == 0.0  # past the cap: nothing


def _nncf_loop_on_a_budget(cap: int, groups: int, worse: list[bool], affordable: int) -> int:
    """Evaluations after revert 1 is measured, as `_nncf_loop` counts them, where an undone revert whose ranking
    would need more than the evaluations left of `affordable` ends accuracy control (`converters.budget`)."""
    evaluations, remaining, step_back = 0, groups, True
    for iteration in range(1, cap + 1):
        remaining -= 1
        if iteration == cap:
            break
        if iteration > 1:
            evaluations += 1
        if not worse[iteration - 1] or step_back:
            step_back = False
            continue
        if remaining + 1 > affordable - evaluations:
            break
        remaining += 1
        evaluations += remaining
        step_back = True
    return evaluations


@pytest.mark.parametrize("affordable", [0, 9, 14, 23, 30, 1000])
@pytest.mark.parametrize(("cap", "groups", "p"), [(6, 10, 0.5), (7, 8, 0.3)])
def test_the_expected_evaluations_on_a_budget_weigh_every_path_by_its_chance(
    cap: int, groups: int, p: float, affordable: int
) -> None:
    expected = 0.0
    for worse in itertools.product([False, True], repeat=cap):
        chance = 1.0
        for w in worse[1:]:
            chance *= p if w else 1 - p
        expected += chance / 2 * _nncf_loop_on_a_budget(cap, groups, list(worse), affordable)
    assert expected_evaluations(cap, 1, 0, groups, True, p, float(affordable)) == pytest.approx(expected)


def test_an_undone_revert_whose_ranking_the_budget_cannot_hold_ends_accuracy_control() -> None:
    # No ranking fits (10 groups, 5 evaluations left): each undone revert ends it. Half the paths end at each
    # decision, so revert k + 1 is measured on a half, a quarter, an eighth of them; the cap's last is not.
    assert expected_evaluations(5, 1, 0, 10, False, 0.5, affordable=5.0) == pytest.approx(0.5 + 0.25 + 0.125)
    assert expected_evaluations(5, 1, 0, 10, False, 1.0, affordable=5.0) == 0.0  # the first decision ends it
    # With the budget far away, as before; with room for exactly one ranking, the second undone revert ends it.
    far = expected_evaluations(5, 1, 0, 10, False, 1.0, affordable=1e9)
    assert far == expected_evaluations(5, 1, 0, 10, False, 1.0) == 22.0
    assert expected_evaluations(5, 1, 0, 10, False, 1.0, affordable=12.0) == 10 + 1 + 1


def test_the_time_left_ends_at_the_budget_when_no_ranking_fits_in_it() -> None:
    clock = [0.0]
    pace = ControlPace(20, clock=lambda: clock[0])
    pace.line("ORIGINAL metric is used to rank quantizers")
    for at in range(1, 32):  # 30 groups ranked, 1 s each
        clock[0] = float(at)
        pace.evaluated()
    pace.line("Reverted 1 operations to the floating-point precision")
    clock[0] = 32.0
    pace.evaluated()
    pace.line("Accuracy drop with the new quantization scope is 2.5 (absolute)")
    unbounded = pace.left()
    assert unbounded is not None and unbounded > 30  # re-rankings of 30 groups, one in three decisions
    # 10 s of budget left: a ranking of about 30 groups cannot start, so each undone revert ends it. The first
    # revert is kept whatever it measured; the second is measured, then a third of paths end at each decision.
    near = pace.left(budget_left=10.0)
    assert near is not None and near == pytest.approx(1.0 + sum((2 / 3) ** k for k in range(1, 18)), rel=1e-6)
    assert near < 10.0


def _replay(pace: ControlPace, clock: list[float], events: tuple[tuple[float, str], ...], until: float) -> None:
    for at, line in events:
        if at > until:
            return
        clock[0] = at
        if line:
            pace.line(line)
        else:
            pace.evaluated()


@pytest.mark.parametrize("run", RUNS, ids=[run.model for run in RUNS])
def test_the_loop_is_followed_on_recorded_runs(run: RecordedRun) -> None:
    """On NNCF's own runs: the groups of the first ranking, and the size of each ranking after it."""
    clock = [0.0]
    pace = ControlPace(20, clock=lambda: clock[0])
    rerank_sizes = []
    for index, (at, line) in enumerate(run.events):
        clock[0] = at
        if line:
            pace.line(line)
        else:
            pace.evaluated()
        if line.startswith("Re-calculating"):
            expected_size = pace.groups - (pace.reverts - pace.reranks)
            after = range(index + 1, len(run.events))
            done = next((i for i in after if run.events[i][1].startswith("Reverted")), len(run.events))
            rerank_sizes.append((expected_size, sum(1 for _, e in run.events[index + 1 : done] if not e)))
    assert pace.groups == run.groups
    assert pace.reranks == len(rerank_sizes) == run.reranks
    # Reverts NNCF could have undone, read off its log by hand: the face model's 2, 4, 5, 7, 9 and 11 to 20, the
    # hand model's 2 to 6, 8, 9, 11, 13, 15, 17, 18 and 20 (each other one followed a re-ranking, or was the first).
    assert pace.decisions == {"face_landmark": 15, "hand_landmark_lite": 13}[run.model]
    # Every ranking a revert followed was as large as predicted; the last of each run came after the cap's
    # last revert, and in the hand model's run the budget ran out during it (its answers are not evaluations).
    assert all(expected == counted for expected, counted in rerank_sizes[:-1]), rerank_sizes
    assert 0 < rerank_sizes[-1][1] <= rerank_sizes[-1][0]


def test_no_estimate_until_the_first_ranking_is_over_then_the_recent_pace() -> None:
    clock = [0.0]
    pace = ControlPace(3, clock=lambda: clock[0])
    for at in (1.0, 2.0):  # the float and the quantized model
        clock[0] = at
        pace.evaluated()
    pace.line("ORIGINAL metric is used to rank quantizers")
    for at in (5.0, 8.0, 11.0):  # 3 groups, 3 s each
        clock[0] = at
        pace.evaluated()
        assert pace.left() is None
    pace.line("Reverted 2 operations to the floating-point precision")
    assert pace.groups == 3 and pace.seconds_per_evaluation() == 3.0
    # Revert 1 measured (3 s), revert 2 measured (3 s), undone a third of the time: 3 - 2 + 1 = 2 groups (6 s)
    assert pace.left() == pytest.approx(3.0 + 3.0 + 6.0 / 3)
    clock[0] = 12.0
    pace.evaluated()  # a quicker evaluation
    pace.line("Accuracy drop with the new quantization scope is 0.5 (absolute)")
    assert pace.seconds_per_evaluation() == pytest.approx(10.0 / 4)
    assert pace.left() == pytest.approx(2.5 + 5.0 / 3)
