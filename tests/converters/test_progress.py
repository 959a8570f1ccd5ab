"""The conversion's progress display: stages, elapsed time and an ETA from what this run measured."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator

import pytest

from converters.progress import (
    ProgressHandler,
    Schedule,
    end_schedule,
    library_output_folded,
    start_schedule,
    step,
    timing,
)
from converters.progress_control import ControlPace


class SteppedClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _schedule(clock: SteppedClock) -> Schedule:
    planned = Schedule(calibration_samples=300, evaluation_samples=100, bench_seconds=2.0, clock=clock)
    planned.plan(["openvino/fp32", "openvino/int8", "onnx/int8"])
    return planned


def test_the_eta_is_unknown_until_the_reference_sets_the_pace_then_adds_up_the_stages_ahead() -> None:
    clock = SteppedClock()
    planned = _schedule(clock)
    planned.begin("reference")
    assert planned.eta() is None
    clock.now += 10.0  # 0.1 s per sample
    planned.begin("openvino/fp32: build")
    # fp32 build 2 s (a guess), each int8 build 2 x 300 x 0.1 + 1 = 61 s, each evaluation 100 x 0.1 + 2 x 2 + 1 = 15 s
    assert planned.eta() == pytest.approx(2 + 61 + 61 + 3 * 15)
    clock.now += 1.0
    assert planned.eta() == pytest.approx(1 + 61 + 61 + 3 * 15)
    clock.now += 5.0  # the build took longer than guessed: the current stage never counts below zero
    assert planned.eta() == pytest.approx(61 + 61 + 3 * 15)
    planned.begin("openvino/int8: build")
    clock.now += 20.0
    planned.begin("onnx/int8: build")  # a timed int8 build stands for the next one
    assert planned.eta() == pytest.approx(20 + 3 * 15)
    clock.now += 20.0
    planned.begin("openvino/fp32: evaluate")
    clock.now += 9.0
    planned.begin("openvino/int8: evaluate")
    assert planned.eta() == pytest.approx(2 * 9)


def test_recovery_counts_at_most_its_budget_and_attempts_not_needed_are_dropped() -> None:
    clock = SteppedClock()
    planned = Schedule(calibration_samples=300, evaluation_samples=100, bench_seconds=2.0, clock=clock)
    planned.plan(["openvino/int8"])
    planned.begin("reference")
    clock.now += 10.0
    planned.begin("openvino/int8: build")
    clock.now += 30.0
    planned.begin("openvino/int8: evaluate")
    clock.now += 10.0
    planned.plan_recovery([("attempt 2: mixed preset", False), ("attempt 3: accuracy control", True)], 120.0)
    # The evaluation's last 5 s, and recovery: accuracy control takes what its budget leaves, and its model is
    # then measured as any variant (15 s, estimated from the pace of the reference).
    assert planned.eta() == pytest.approx(5.0 + 120.0 + 15.0)
    planned.begin("attempt 2: mixed preset")
    clock.now += 40.0
    planned.begin("attempt 3: accuracy control")
    assert planned.eta() == pytest.approx(80.0 + 10.0)  # an evaluation was timed by now: 10 s
    clock.now += 30.0
    planned.end_recovery()
    assert planned.eta() == 0.0  # only the report is left
    assert [s.name for s in planned.stages if s.kind in ("attempt", "control")] == [
        "attempt 2: mixed preset",
        "attempt 3: accuracy control",
    ]
    planned.plan_recovery([("attempt 2: mixed preset", False)], 120.0)
    planned.end_recovery()  # never started: not a stage any more
    assert sum(s.name == "attempt 2: mixed preset" for s in planned.stages) == 1


def test_accuracy_control_is_counted_by_what_its_loop_has_left_when_that_ends_before_the_budget() -> None:
    clock = SteppedClock()
    planned = Schedule(calibration_samples=300, evaluation_samples=100, bench_seconds=2.0, clock=clock)
    planned.plan(["openvino/int8"])
    planned.begin("reference")
    clock.now += 10.0
    planned.begin("openvino/int8: build")
    clock.now += 30.0
    planned.begin("openvino/int8: evaluate")
    clock.now += 10.0  # the evaluation of accuracy control's model, after it, is estimated at this: 10 s
    planned.plan_recovery([("attempt 2: accuracy control", True)], 120.0)
    planned.begin("attempt 2: accuracy control")
    pace = ControlPace(3, clock)
    planned.control_started(pace)
    for _ in range(2):  # NNCF evaluates the float and the quantized model
        clock.now += 1.0
        pace.evaluated()
    pace.line("ORIGINAL metric is used to rank quantizers")
    for _ in range(5):  # then ranks 5 groups, 2 s each: how many there are is not known until it is over
        clock.now += 2.0
        pace.evaluated()
        assert planned.eta() == pytest.approx(120.0 - (clock.now - 150.0) + 10.0)  # the budget bounds it
    pace.line("Reverted 1 operations to the floating-point precision")
    # Revert 1 measured (2 s); kept whatever it measures, so no re-ranking; revert 2 measured (2 s); a third
    # of the time undone and 5 - 2 + 1 = 4 groups ranked again (8 s); revert 3, the cap's last, is not measured.
    assert planned.eta() == pytest.approx(2.0 + 2.0 + 8.0 / 3 + 10.0)
    clock.now += 2.0
    pace.evaluated()
    pace.line("Accuracy drop with the new quantization scope is 2.5 (absolute)")
    pace.line("Reverted 1 operations to the floating-point precision")
    clock.now += 0.5
    assert planned.eta() == pytest.approx(1.5 + 8.0 / 3 + 10.0)
    clock.now += 1.5
    pace.evaluated()
    pace.line("Accuracy drop with the new quantization scope is 2.6 (absolute)")
    pace.line("Re-calculating ranking scores for remaining groups")
    assert planned.eta() == pytest.approx(4 * 2.0 + 10.0)  # ranking the 4 groups; then revert 3 ends it
    for _ in range(2):
        clock.now += 30.0  # the machine got busy: the mean over the evaluations since ranking began shows it
        pace.evaluated()
    assert planned.eta() == pytest.approx(2 * (226.0 - 152.0) / 9 + 10.0)
    clock.now += 20.0  # overdue: at least the one evaluation after this is left
    assert planned.eta() == pytest.approx((226.0 - 152.0) / 9 + 10.0)
    clock.now += 20.0  # and never more than the budget, which ends at 270 s
    assert planned.eta() == pytest.approx(4.0 + 10.0)
    planned.begin_nothing()
    assert planned.control is None  # a later accuracy control starts afresh


@pytest.fixture
def converters_log() -> Iterator[logging.Logger]:
    logger = logging.getLogger("converters")
    saved = (logger.handlers, logger.level, logger.propagate)
    yield logger
    logger.handlers, logger.level, logger.propagate = saved
    end_schedule()


def _attach(logger: logging.Logger, handler: logging.Handler) -> None:
    logger.handlers = [handler]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False


def test_plain_lines_carry_the_time_and_eta_and_warnings_stand_alone(converters_log: logging.Logger) -> None:
    clock = SteppedClock()
    planned = start_schedule(_schedule(clock))
    stream = io.StringIO()
    handler = ProgressHandler(stream, tty=False)
    handler.setLevel(logging.INFO)
    _attach(converters_log, handler)
    planned.begin("reference")
    step("reference: running 100 samples")
    clock.now += 75.0  # 0.75 s per sample: 2 + 2 x (2 x 300 x 0.75 + 1) + 3 x (75 + 2 x 2 + 1) s ahead
    planned.begin("openvino/fp32: build")
    step("openvino/fp32: converting")
    converters_log.warning("few samples")
    converters_log.debug("a library's line")
    assert stream.getvalue().splitlines() == [
        "edge-convert: [0:00, ETA ?] reference: running 100 samples",
        "edge-convert: [1:15, ETA 19:04] openvino/fp32: converting",
        "edge-convert: few samples",
    ]


def test_on_a_terminal_one_status_line_is_rewritten_and_warnings_go_above_it(converters_log: logging.Logger) -> None:
    stream = io.StringIO()
    handler = ProgressHandler(stream, tty=True, refresh_s=3600)
    _attach(converters_log, handler)
    step("first stage")
    step("second stage")
    converters_log.warning("a warning")
    handler.close()
    assert stream.getvalue() == (
        "\r\x1b[Kedge-convert: first stage"
        "\r\x1b[Kedge-convert: second stage"
        "\r\x1b[Kedge-convert: a warning\n"
        "\r\x1b[Kedge-convert: second stage"
        "\r\x1b[K"
    )


def test_what_libraries_print_goes_to_the_debug_log(
    converters_log: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = io.StringIO()
    _attach(converters_log, ProgressHandler(stream, tty=False))
    with library_output_folded():
        print("Statistics collection 100% 300/300")
        sys.stdout.write("INFO:nncf:Accuracy drop: 2.7\n\n")
    assert capsys.readouterr().out == ""
    assert stream.getvalue().splitlines() == [
        "edge-convert: Statistics collection 100% 300/300",
        "edge-convert: INFO:nncf:Accuracy drop: 2.7",
    ]


def test_until_int8_is_measured_the_eta_says_what_recovery_may_add() -> None:
    clock = SteppedClock()
    planned = Schedule(calibration_samples=300, evaluation_samples=100, bench_seconds=2.0, clock=clock)
    planned.plan(["openvino/fp32", "openvino/int8"])
    planned.recovery_budget = 120.0
    planned.begin("reference")
    clock.now += 10.0
    planned.begin("openvino/fp32: build")
    planned.skip("openvino/fp32: evaluate")  # not built: never evaluated, so not waited for
    assert "openvino/fp32: evaluate" not in [s.name for s in planned.stages]
    assert planned.eta() == pytest.approx(2 + 61 + 15)
    assert planned.possible_recovery() == 120.0
    start_schedule(planned)
    try:
        assert timing(planned) == "[0:10, ETA 1:18 + up to 2:00 if int8 needs recovery] "
    finally:
        end_schedule()
    planned.begin("openvino/int8: evaluate")
    planned.plan_recovery([("attempt 2: mixed preset", False)], 120.0)
    assert planned.possible_recovery() is None  # now part of the ETA itself
    planned.end_recovery()
    assert planned.possible_recovery() is None
    other = Schedule(clock=clock)
    other.plan(["openvino/int8"])
    other.recovery_budget = 120.0
    other.begin("openvino/int8: evaluate")
    other.begin("report")  # measured and not flagged: no recovery after all
    assert other.possible_recovery() is None
