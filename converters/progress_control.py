"""How long NNCF's accuracy control has left, from what it has done so far: part of the conversion's ETA.

Accuracy control (`nncf.quantize_with_accuracy_control`) costs one unit of work per evaluation: it
compiles a model and runs the validation function on it, and every unit takes about as long as the next
(ranking uses the whole validation set when it is smaller than NNCF's ranking subset, as ours is). What
varies is how many evaluations it makes, and NNCF's loop says exactly when it makes them:

1. it evaluates the float and the quantized model, then ranks every group of quantizers: one evaluation
   per group (`G` groups);
2. each iteration, up to the cap, reverts the top-ranked group to float ("Reverted ...") and evaluates the
   model once;
3. when that revert made the drop worse, it is undone and the groups still quantized are ranked again
   ("Re-calculating ranking scores ..."): one evaluation per group, `G − kept reverts` of them. An
   iteration that follows such a re-ranking is kept whatever it measures, so it never re-ranks. The cap's
   last revert is not measured at all (`converters.budget.BudgetedValidation` ends accuracy control there).

Whether a revert makes the drop worse cannot be known before it is measured, so the re-rankings ahead are
counted at the rate of those seen so far in this run (each decision NNCF made: kept, or undone and
re-ranked), starting from one in three before any is seen. Near the end of the recovery budget, a revert
that is undone ends accuracy control instead when what is left of the budget could not hold the
re-ranking it would start (`converters.budget`), so the estimate ends such paths there rather than
counting on them until the budget runs out. The seconds per evaluation are measured on
the evaluations of this run, the recent ones, so a machine that got busier is seen soon. Until the first
ranking is over the number of groups is not known and there is no estimate: the budget bounds it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["ControlPace", "expected_evaluations"]

PRIOR_RERANKS, PRIOR_DECISIONS = 1.0, 3.0  # before any decision is seen: one re-ranking in three decisions
RECENT_EVALUATIONS = 20  # the seconds per evaluation are the mean over this many of the latest
REVERTED = "Reverted "
RERANK = "Re-calculating ranking scores"
MEASURED = "Accuracy drop with the new quantization scope"
RANKING = "metric is used to rank quantizers"  # NNCF logs it as the first ranking starts


def expected_evaluations(
    cap: int, reverts: int, reranks: int, groups: int, kept_free: bool, p: float, affordable: float = math.inf
) -> float:
    """Evaluations NNCF is expected to make after measuring revert `reverts` (below `cap`), before deciding on
    it: its re-ranking, if it makes one, and every iteration after it but the cap's last, which ends it.

    `reranks` is the number of re-rankings so far, `groups` the number of groups the first ranking ranked,
    `kept_free` whether this revert is kept whatever it measured (it follows a re-ranking, or is the first),
    and `p` the chance that a revert that is not is undone and re-ranked. `affordable` is the evaluations
    the recovery budget still allows from now: an undone revert whose re-ranking would need more than what
    is left of them on its path ends accuracy control there.
    """
    # Chance of each (kept_free, re-rankings so far, evaluations spent since now) before deciding on revert k:
    # the size of a re-ranking depends on how many reverts were kept, so on how many were undone, and whether
    # it fits the budget on what its path has spent. Spending is only told apart up to the budget.
    bounded = math.isfinite(affordable)
    ceiling = math.ceil(affordable) + 1 if bounded else 0
    states = {(kept_free, reranks, 0): 1.0}
    total = 0.0
    for k in range(reverts, cap):
        decided: dict[tuple[bool, int, int], float] = {}
        for (free, done, spent), chance in states.items():
            if free:
                decided[(False, done, spent)] = decided.get((False, done, spent), 0.0) + chance
                continue
            kept_so_far = k - done  # revert k included, as NNCF counts its remaining groups before undoing it
            size = groups - kept_so_far + 1
            if size <= affordable - spent:  # otherwise that path ends here: no ranking is started
                total += chance * p * size
                after = (True, done + 1, min(spent + size, ceiling))
                decided[after] = decided.get(after, 0.0) + chance * p
            decided[(False, done, spent)] = decided.get((False, done, spent), 0.0) + chance * (1 - p)
        if k + 1 < cap:
            total += sum(decided.values())  # revert k + 1 measured, on every path still running
            if bounded:
                measured: dict[tuple[bool, int, int], float] = {}
                for (free, done, spent), chance in decided.items():
                    key = (free, done, min(spent + 1, ceiling))
                    measured[key] = measured.get(key, 0.0) + chance
                decided = measured
        states = decided
    return total


@dataclass
class ControlPace:
    """What one run of accuracy control did, from NNCF's log lines and the validation function's calls."""

    cap: int
    clock: Callable[[], float] = time.monotonic
    evaluations: list[float] = field(default_factory=list)  # on `clock`: when each validation call ended
    groups: int | None = None  # ranked by the first ranking, once it is over
    reverts: int = 0
    reranks: int = 0
    decisions: int = 0  # reverts NNCF could have undone, and decided on
    kept_free: bool = True  # the latest revert is kept whatever it measures
    phase: str = "start"  # start, ranking, measuring (a revert), decided (measured), reranking
    ranking_from: int = 0  # evaluations before the current ranking began
    first_ranking_from: int | None = None  # evaluations before the first ranking began

    def line(self, message: str) -> None:
        """One of NNCF's log lines: where its loop stands."""
        if RANKING in message and self.phase == "start":
            self.phase, self.ranking_from = "ranking", len(self.evaluations)
            self.first_ranking_from = self.ranking_from
        elif message.startswith(REVERTED):
            if self.phase == "ranking" and self.groups is None:
                self.groups = len(self.evaluations) - self.ranking_from
            if self.phase == "decided":  # the revert before was kept
                self.decisions += 0 if self.kept_free else 1
                self.kept_free = False
            self.reverts += 1
            self.phase = "measuring"
        elif message.startswith(MEASURED):
            self.phase = "decided"
        elif message.startswith(RERANK):
            self.decisions += 1
            self.reranks += 1
            self.kept_free = True
            self.phase, self.ranking_from = "reranking", len(self.evaluations)

    def evaluated(self) -> None:
        """The validation function returned: one evaluation done."""
        self.evaluations.append(self.clock())

    def rerank_chance(self) -> float:
        return (self.reranks + PRIOR_RERANKS) / (self.decisions + PRIOR_DECISIONS)

    def rerank_seconds(self) -> float | None:
        """What ranking the groups again would take, were the revert being measured undone."""
        each = self.seconds_per_evaluation()
        if each is None or self.groups is None:
            return None
        return (self.groups - (self.reverts - self.reranks) + 1) * each

    def seconds_per_evaluation(self) -> float | None:
        """The mean time between the latest evaluations since the first ranking began: those before it (of the
        float and the quantized model) follow the quantization, which is not an evaluation."""
        if self.first_ranking_from is None:
            return None
        times = self.evaluations[max(self.first_ranking_from - 1, 0) :][-(RECENT_EVALUATIONS + 1) :]
        if len(times) < 2:
            return None
        return (times[-1] - times[0]) / (len(times) - 1)

    def _after(self, reverts: int, kept_free: bool, affordable: float) -> float:
        assert self.groups is not None
        chance = self.rerank_chance()
        return expected_evaluations(self.cap, reverts, self.reranks, self.groups, kept_free, chance, affordable)

    def left(self, budget_left: float = math.inf) -> float | None:
        """Seconds accuracy control should still take, `budget_left` seconds before its budget ends, or None
        before the first ranking is over."""
        each = self.seconds_per_evaluation()
        if each is None or self.groups is None:
            return None
        affordable = budget_left / each if each > 0 else math.inf
        count = 0.0
        if self.phase == "measuring" and self.reverts < self.cap:
            count = 1.0 + self._after(self.reverts, self.kept_free, affordable - 1.0)
        elif self.phase == "decided":
            count = self._after(self.reverts, self.kept_free, affordable)
        elif self.phase == "reranking":
            size = self.groups - (self.reverts - self.reranks)
            count = max(size - (len(self.evaluations) - self.ranking_from), 0)
            if self.reverts + 1 < self.cap:
                count += 1.0 + self._after(self.reverts + 1, True, affordable - count - 1.0)
        since = self.clock() - self.evaluations[-1]
        return max(count * each - since, (count - 1) * each, 0.0)
