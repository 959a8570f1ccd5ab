"""A time budget and an iteration cap for int8 recovery, so that a conversion has a known cost.

NNCF's accuracy control reverts one group of operations to float at a time and ranks the remaining
groups again as it goes; on a model of a few hundred layers that runs for many minutes with no bound
but the number of layers. NNCF takes an iteration cap (`max_num_iterations`) but no time limit, and
where it stops short of `max_drop` it returns the model as its last revert left it, not the best it
measured. So the converter bounds it twice, and judges what comes back itself:

- the cap goes to NNCF as it is, and its last revert ends accuracy control at once, unmeasured, instead of
  NNCF measuring it and then ranking every remaining group again for nothing (see `BudgetedValidation`);
- the time limit goes in through the validation function NNCF calls after every revert. Once the budget
  is spent, `BudgetedValidation` answers with the float model's own figures without running anything:
  NNCF reads that as "accuracy restored", stops, and returns the model as it stands (the groups reverted
  so far, plus the one it was trying). The converter then measures that model as it measures every
  attempt and keeps whichever attempt measured best, so an answer that is not a real measurement never
  decides what ships. When the time runs out before the first revert, while NNCF still ranks the layers
  (which compiles one model per group of layers, a minute on a model of fifty layers), the attempt is
  abandoned at once instead: the rest of the ranking would be spent on answers that rank nothing. A later
  ranking cannot be cut short that way (it compiles a model per group whatever the answers), so one that
  would not end within the budget is not started: the revert that would have caused it is kept instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from converters.errors import VariantSkippedError
from converters.progress import current_schedule, step
from converters.progress_control import ControlPace

if TYPE_CHECKING:
    from converters.report import Attempt

__all__ = [
    "DEFAULT_RECOVERY_ITERATIONS",
    "DEFAULT_RECOVERY_SECONDS",
    "BudgetedValidation",
    "RecoveryBudget",
    "budget_summary",
    "control_outcome",
    "counting_reverts",
]

DEFAULT_RECOVERY_SECONDS = 120.0  # with the rest of a default conversion, within 3 minutes on 2 cores
DEFAULT_RECOVERY_ITERATIONS = 20  # groups of operations accuracy control may revert to float

Validate = Callable[[Any, Iterable[Any]], tuple[float, list[float]]]


@dataclass
class RecoveryBudget:
    """Seconds and reverts that recovery may spend, counted from its creation; `clock` for tests to drive."""

    seconds: float = DEFAULT_RECOVERY_SECONDS
    max_iterations: int = DEFAULT_RECOVERY_ITERATIONS
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    stopped_control: bool = field(default=False, init=False)  # the last accuracy control was ended by the clock
    control_reverts: int = field(default=0, init=False)  # reverts the last accuracy control measured
    pace: ControlPace | None = field(default=None, init=False)  # where the last accuracy control's loop stands

    def __post_init__(self) -> None:
        self.started = self.clock()

    def start_control(self) -> None:
        self.stopped_control, self.control_reverts = False, 0
        self.pace = ControlPace(self.max_iterations, self.clock)

    @property
    def capped_control(self) -> bool:
        """The last accuracy control reverted as many groups as it was allowed to."""
        return self.control_reverts >= self.max_iterations

    def elapsed(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        return max(0.0, self.seconds - self.elapsed())

    @property
    def spent(self) -> bool:
        return self.elapsed() >= self.seconds

    def describe(self) -> str:
        return f"{_duration(self.seconds)} and at most {self.max_iterations} reverts"


class BudgetedValidation:
    """NNCF's validation function, ended by the budget: after it is spent, every model scores as the float one.

    The first call over every item is NNCF's float model (NNCF validates it before anything else); its
    metric and per-item values are what a spent budget answers with. The same answer, without running
    anything, ends accuracy control at its cap's last revert: NNCF would otherwise measure that revert and,
    where it made the drop worse, rank every remaining group again (a minute on 2 cores) only to undo it
    and stop. The model it returns keeps that revert, one more layer in float, and is measured as every
    attempt is.
    """

    def __init__(self, validate: Validate, item_count: int, budget: RecoveryBudget) -> None:
        self._validate = validate
        self._item_count = item_count
        self._budget = budget
        self._float_metric: float | None = None
        self._float_values: dict[int, float] = {}
        self._measured: float | None = None  # the latest revert's metric (the quantized model's before one)

    def __call__(self, compiled: Any, items: Iterable[Any]) -> tuple[float, list[float]]:
        listed = list(items)
        floated = self._float_metric
        if floated is not None and (self._budget.spent or self._budget.capped_control):
            if not self._budget.capped_control:
                self._budget.stopped_control = True
            if self._budget.control_reverts == 0:  # still ranking: what is left of it would only compile models
                raise VariantSkippedError(
                    f"the time ran out ({self._budget.describe()}) before accuracy control reverted any layer"
                )
            return self._as_float(listed, floated)
        metric, values = self._validate(compiled, listed)
        pace = self._budget.pace
        if pace is not None:
            pace.evaluated()
        whole = len(listed) == self._item_count
        if floated is None and whole:
            self._float_metric = metric
            self._float_values = {id(item): value for item, value in zip(listed, values, strict=True)}
        elif floated is not None and whole and pace is not None and pace.phase in ("start", "measuring"):
            if self._rerank_overruns(pace, metric):
                self._budget.stopped_control = True
                return self._as_float(listed, floated)
            self._measured = metric
        return metric, values

    def _as_float(self, listed: list[Any], floated: float) -> tuple[float, list[float]]:
        """The float model's figures for `listed`: what NNCF reads as "accuracy restored"."""
        values = [self._float_values.get(id(item), floated) for item in listed]
        whole = len(listed) == self._item_count or not values
        return (floated if whole else sum(values) / len(values)), values

    def _rerank_overruns(self, pace: ControlPace, metric: float) -> bool:
        """The revert just measured left the metric worse than the one before it, so NNCF will undo it and rank
        the remaining groups again, and that would not end within the budget.

        Once started, a ranking runs to its end: a spent budget spares the models' runs, not their compiling,
        which is most of the time. Ended here instead, accuracy control returns the model with this revert, as
        the budget ending it at the next revert would have (with that one's).
        """
        if pace.kept_free or self._measured is None or metric >= self._measured:
            return False
        seconds = pace.rerank_seconds()
        return seconds is not None and seconds > self._budget.left()


@contextmanager
def counting_reverts(budget: RecoveryBudget) -> Iterator[None]:
    """Count accuracy control's iterations into `budget` while NNCF runs, from the line NNCF logs for each.

    NNCF says how many groups it reverted only in its log. Ranking also runs the validation function,
    so counting its calls would not do. Its lines also go to the ETA, which follows NNCF's loop by them.
    """
    budget.start_control()
    schedule = current_schedule()
    if schedule is not None and budget.pace is not None:
        schedule.control_started(budget.pace)
    handler = _RevertCounter(budget)
    logger = logging.getLogger("nncf")
    level = logger.level
    logger.setLevel(min(level or logging.INFO, logging.INFO))  # NNCF's own handler keeps its level
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


class _RevertCounter(logging.Handler):
    def __init__(self, budget: RecoveryBudget) -> None:
        super().__init__(logging.INFO)
        self._budget = budget

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if self._budget.pace is not None:
            self._budget.pace.line(message)
        if message.startswith("Reverted "):
            self._budget.control_reverts += 1
            step(
                f"openvino/int8: accuracy control reverted group {self._budget.control_reverts} of at most "
                f"{self._budget.max_iterations} ({self._budget.left():.0f} s of budget left)"
            )


def control_outcome(budget: RecoveryBudget) -> str:
    """How the last accuracy control ended, where a limit ended it: the attempt's message in the report."""
    if budget.stopped_control:
        return f"accuracy control stopped when the time ran out, at revert {budget.control_reverts}"
    if budget.capped_control:
        return f"accuracy control reached its cap of {budget.max_iterations} reverts"
    return ""


def budget_summary(budget: RecoveryBudget, attempts: list[Attempt]) -> str:
    """How far recovery got within its budget, and what a larger one would try next: a line of the report."""
    line = f"Recovery took {budget.elapsed():.0f} s (budget: {budget.describe()})."
    if any(a.status == "ok" for a in attempts):
        return line
    untried = [a.name for a in attempts if a.status == "skipped" and "budget" in a.message]
    if untried:
        return f"{line} The time ran out: a larger --recovery-budget would try next: {', '.join(untried)}."
    if budget.stopped_control and budget.control_reverts == 0:
        return (
            f"{line} The time ran out while accuracy control ranked the layers: a larger --recovery-budget would let "
            "it revert the costliest to float."
        )
    if budget.stopped_control:
        return (
            f"{line} Accuracy control was stopped by the time at revert {budget.control_reverts}: a larger "
            "--recovery-budget would let it revert more layers to float."
        )
    if budget.capped_control:
        return (
            f"{line} Accuracy control reverted as many groups as allowed: a larger --recovery-iterations would let it "
            "revert more layers to float."
        )
    return line


def _duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
