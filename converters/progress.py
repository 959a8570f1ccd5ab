"""Progress of a conversion that takes minutes: the stage it is in, the time spent, and an ETA; its warnings.

Every message goes through the `converters` logger (`step` for progress, `Warnings.add` for what the
report must also say). `edge-convert` shows them through `ProgressHandler`: on a terminal one status line
rewritten in place, with warnings printed above it; elsewhere (a log file, CI) one plain line each. Both
carry the elapsed time and the ETA of the `Schedule`.

The ETA adds up what the stages ahead should take, each estimated from what was already measured in this
run: the reference's run gives the time per sample, which sizes the evaluations and the int8 calibrations
until a stage of the same kind has been timed, and from then on that stage's time stands for the rest of
its kind. Recovery is only planned once an int8 variant is flagged; it is counted at its budget, the most
it can take, and each attempt it finishes narrows that. Accuracy control, once it has ranked its groups, is
counted by what its loop has left (`converters.progress_control`) when that ends before the budget.
"""

from __future__ import annotations

import io
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from typing import TextIO

from converters.progress_control import ControlPace

__all__ = [
    "ProgressHandler",
    "Schedule",
    "Warnings",
    "current_schedule",
    "end_schedule",
    "library_output_folded",
    "log",
    "plan_stages",
    "skip_stage",
    "stage",
    "start_schedule",
    "step",
    "timing",
]

log = logging.getLogger("converters")

FLOAT_BUILD_GUESS_S = 2.0  # converting to a float format, before one was timed: a few seconds at most
OVERHEAD_S = 1.0  # loading a variant into the runtime, writing files


def step(message: str) -> None:
    """One progress line for a step that may take a while."""
    log.info(message)


class Warnings:
    """Warnings logged as they happen and kept for the report."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, message: str) -> None:
        log.warning(message)
        self.items.append(message)


RECOVERY_KINDS = ("attempt", "control")  # a quantization tried again; one with accuracy control
RECOVERED = "openvino/int8"  # the variant recovery quantizes again when it is flagged


@dataclass
class _Stage:
    name: str
    kind: str  # reference, build-float, build-int8, evaluate, attempt, control, report
    seconds: float | None = None  # measured, once done


@dataclass
class Schedule:
    """The stages of one conversion in order, with the time each took: what the ETA is computed from."""

    calibration_samples: int = 0
    evaluation_samples: int = 0
    bench_seconds: float = 0.0
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    stages: list[_Stage] = field(default_factory=list)
    current: _Stage | None = None
    current_started: float = 0.0
    recovery_deadline: float | None = None  # on `clock`: recovery's stages together end by then
    recovery_budget: float = 0.0  # what recovery may add, while it is not known whether int8 needs it
    control: ControlPace | None = None  # what the accuracy control under way has done

    def __post_init__(self) -> None:
        self.started = self.clock()

    def plan(self, variant_ids: Sequence[str]) -> None:
        """The stages after reading the inputs: the reference run, then each variant's build and evaluation."""
        stages = [("reference", "reference")]
        for vid in variant_ids:
            int8 = vid.endswith("int8") or vid == "tflite/edgetpu"
            stages += [(f"{vid}: build", "build-int8" if int8 else "build-float"), (f"{vid}: evaluate", "evaluate")]
        self.stages += [_Stage(name, kind) for name, kind in [*stages, ("report", "report")]]

    def plan_recovery(self, attempts: Sequence[tuple[str, bool]], seconds: float) -> None:
        """Recovery's attempts (name, with accuracy control), next after the current stage, within `seconds`."""
        index = self.stages.index(self.current) + 1 if self.current in self.stages else len(self.stages)
        self.stages[index:index] = [
            _Stage(name, "control" if controlled else "attempt") for name, controlled in attempts
        ]
        self.recovery_deadline = self.clock() + seconds

    def control_started(self, pace: ControlPace) -> None:
        """Accuracy control starts in the current stage; `pace` follows its loop, and the ETA counts by it."""
        if self.current is not None and self.current.kind == "control":
            self.control = pace

    def end_recovery(self) -> None:
        """Attempts not started will not be: recovery succeeded or ran out of time."""
        self.begin_nothing()
        self.stages = [s for s in self.stages if s.kind not in RECOVERY_KINDS or s.seconds is not None]
        self.recovery_deadline = None

    def skip(self, name: str) -> None:
        """A planned stage that will not run (the evaluation of a variant that was not built)."""
        self.stages = [s for s in self.stages if s.name != name or s.seconds is not None or s is self.current]

    def possible_recovery(self) -> float | None:
        """The most recovery may add while it is still open whether openvino/int8 will need it; else None."""
        if not self.recovery_budget or self.recovery_deadline is not None:
            return None
        if any(s.kind in RECOVERY_KINDS for s in self.stages):
            return None
        pending = any(s.name == f"{RECOVERED}: evaluate" and s.seconds is None for s in self.stages)
        return self.recovery_budget if pending else None

    def begin(self, name: str, kind: str = "other") -> None:
        """Stage `name` starts now, and the one before it is done; a stage not planned is added here."""
        self.begin_nothing()
        found = next((s for s in self.stages if s.name == name and s.seconds is None), None)
        if found is None:
            found = _Stage(name, kind)
            self.stages.append(found)
        self.current, self.current_started = found, self.clock()

    def begin_nothing(self) -> None:
        if self.current is not None and self.current.seconds is None:
            self.current.seconds = self.clock() - self.current_started
        self.current, self.control = None, None

    def elapsed(self) -> float:
        return self.clock() - self.started

    def eta(self) -> float | None:
        """Seconds left: what the current stage should still take, plus every stage ahead's estimate."""
        per_sample = self._per_sample()
        if per_sample is None:
            return None
        now, current, started = self.clock(), self.current, self.current_started  # the display reads from a thread
        pace = self.control
        pending = [s for s in list(self.stages) if s.seconds is None]
        left = {id(s): self._estimate(s, per_sample) for s in pending}
        if current is not None and id(current) in left:
            left[id(current)] = max(left[id(current)] - (now - started), 0.0)
            budget_left = math.inf if self.recovery_deadline is None else self.recovery_deadline - now
            control = pace.left(budget_left) if pace is not None and current.kind == "control" else None
            if control is not None:
                left[id(current)] = control
        recovery = sum(left[id(s)] for s in pending if s.kind in RECOVERY_KINDS)
        if self.recovery_deadline is not None:
            recovery = min(recovery, max(self.recovery_deadline - now, 0.0))
        if any(s.kind == "control" for s in pending):  # its model is measured after the budget, as every attempt
            recovery += self._estimate(_Stage("", "evaluate"), per_sample)
        return recovery + sum(left[id(s)] for s in pending if s.kind not in RECOVERY_KINDS)

    def _per_sample(self) -> float | None:
        """Seconds per sample of the reference's run: the pace everything else is first estimated from."""
        reference = next((s.seconds for s in self.stages if s.kind == "reference" and s.seconds is not None), None)
        return None if reference is None else reference / max(self.evaluation_samples, 1)

    def _estimate(self, stage: _Stage, per_sample: float) -> float:
        timed = [s.seconds for s in self.stages if s.kind == stage.kind and s.seconds is not None]
        if timed:
            return sum(timed) / len(timed)
        if stage.kind == "build-float":
            return FLOAT_BUILD_GUESS_S
        if stage.kind == "build-int8":  # statistics over the calibration set, then bias correction: about 2 passes
            return 2 * self.calibration_samples * per_sample + OVERHEAD_S
        if stage.kind == "evaluate":
            return self.evaluation_samples * per_sample + 2 * self.bench_seconds + OVERHEAD_S
        if stage.kind == "attempt":  # an int8 build and its evaluation
            return self._estimate(_Stage("", "build-int8"), per_sample) + self._estimate(
                _Stage("", "evaluate"), per_sample
            )
        if stage.kind == "control":  # as long as its budget lets it
            return float("inf")
        return 0.0  # the report is written in a moment


_schedule: Schedule | None = None


def start_schedule(new: Schedule) -> Schedule:
    """The schedule the display reads and `stage` marks, for one conversion."""
    global _schedule
    _schedule = new
    return new


def end_schedule() -> None:
    global _schedule
    _schedule = None


def current_schedule() -> Schedule | None:
    return _schedule


def plan_stages(
    variant_ids: Sequence[str], calibration_samples: int, evaluation_samples: int, recovery_budget: float
) -> None:
    """The conversion's stages ahead, the sizes their times are first estimated from, and recovery's budget
    (0 when recovery is off)."""
    if _schedule is not None:
        _schedule.calibration_samples, _schedule.evaluation_samples = calibration_samples, evaluation_samples
        _schedule.recovery_budget = recovery_budget if RECOVERED in variant_ids else 0.0
        _schedule.plan(variant_ids)


def skip_stage(name: str) -> None:
    if _schedule is not None:
        _schedule.skip(name)


def stage(name: str, kind: str = "other") -> None:
    """Stage `name` of the conversion starts: the display shows it and the ETA counts it as under way."""
    if _schedule is not None:
        _schedule.begin(name, kind)


class _LibraryLines(io.TextIOBase):
    """Standard output of the libraries the converter drives, kept as debug lines of the `converters` log.

    NNCF logs to the standard output it finds when first imported and draws its progress bars (rich) on
    the one it finds when drawing; TensorFlow's converters print. None of it says where the conversion
    stands, and interleaved with the status line it garbles it.
    """

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                log.debug("%s", line.rstrip())
        return len(text)


@contextmanager
def library_output_folded() -> Iterator[None]:
    """While converting, what NNCF and TensorFlow print goes to the debug log instead of the terminal."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ info and warning lines
    with redirect_stdout(_LibraryLines()):
        yield


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}:{secs:02d}"


def timing(current: Schedule | None) -> str:
    """`[1:23, ETA 2:10]`: time spent and left; `ETA ?` until the reference run has set the pace; while it is open
    whether openvino/int8 needs recovery, `+ up to 2:00 if int8 needs recovery`."""
    if current is None:
        return ""
    left, possible = current.eta(), current.possible_recovery()
    more = f" + up to {_clock(possible)} if int8 needs recovery" if possible and left is not None else ""
    return f"[{_clock(current.elapsed())}, ETA {'?' if left is None else _clock(left)}{more}] "


class ProgressHandler(logging.Handler):
    """The `converters` logger shown on `stream`: a status line on a terminal, plain lines elsewhere."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None, refresh_s: float = 1.0) -> None:
        super().__init__()
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self._status = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if self.tty:  # elapsed time and ETA move on while a stage runs for minutes
            threading.Thread(target=self._refresh, args=(refresh_s,), daemon=True, name="progress").start()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        with self._lock:
            if not self.tty:
                prefix = timing(_schedule) if record.levelno < logging.WARNING else ""
                self.stream.write(f"edge-convert: {prefix}{message}\n")
            elif record.levelno >= logging.WARNING:
                self.stream.write(f"\r\x1b[Kedge-convert: {message}\n")
                self._draw()
            else:
                self._status = message
                self._draw()
            self.stream.flush()

    def _draw(self) -> None:
        if self._status:
            self.stream.write(f"\r\x1b[Kedge-convert: {timing(_schedule)}{self._status}")

    def _refresh(self, every: float) -> None:
        while not self._stop.wait(every):
            with self._lock:
                self._draw()
                self.stream.flush()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if self.tty and self._status:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            self._status = ""
        super().close()
