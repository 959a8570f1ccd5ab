"""`select: fastest`: the box measures the ways it can run a model and keeps the fastest faithful one.

A model configured so starts at once on the device profile's choice. When the box has no stored
choice for the package's files (its first start with a package, or the first after a rollout brought
another release), the model is queued here; one thread measures every runnable choice by the rules of
`bench --select` (`edge_runtime.measure.choices`), stores the winner in the state directory with its
figures, and hands the package's key to `on_chosen`, which moves the pipelines running it onto the
stored choice. Later starts take the stored choice without measuring.

Measuring shares the CPU with the pipelines running meanwhile. It costs them some frames for the
minute it takes, and the alternating rounds give every candidate the same share of that load, so the
ranking holds even where the absolute figures are lower than on an idle box.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from edge_runtime.measure.choices import Hint, every_runnable_choice, measure_choices, store_fastest
from edge_runtime.package.loader import ModelPackage
from edge_runtime.placement.loading import Box
from edge_runtime.placement.selection import Overrides, model_key

__all__ = ["FastestChoices", "SearchState"]

log = logging.getLogger(__name__)

SECONDS_PER_CHOICE = 1.0  # latency and throughput each, over all rounds
ROUNDS = 3


@dataclass
class SearchState:
    """Where the search for one package's fastest choice stands, for the stats and `probe`."""

    package: str
    version: str
    state: Literal["waiting", "measuring", "chosen", "failed"]
    detail: str = ""
    figures: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Request:
    key: str
    package: ModelPackage
    overrides: Overrides
    hint: Hint
    tolerance: float


class FastestChoices:
    """The queue of packages to measure and the thread that measures them, one at a time."""

    def __init__(
        self,
        box: Box,
        state_dir: Path,
        on_chosen: Callable[[str], None],
        held_off: Callable[[], bool] = lambda: False,
        seconds: float = SECONDS_PER_CHOICE,
        rounds: int = ROUNDS,
    ) -> None:
        """`held_off`: while it returns True, nothing is measured (a rollout is shadowing or on probation,
        and its verdict must not see the load of a measurement)."""
        self.box = box
        self.state_dir = state_dir
        self.on_chosen = on_chosen
        self.held_off = held_off
        self.seconds = seconds
        self.rounds = rounds
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._states: dict[str, SearchState] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def request(self, package: ModelPackage, overrides: Overrides, hint: Hint, tolerance: float) -> None:
        """Measure `package` unless it is measured, queued or being measured already."""
        key = model_key(package)
        with self._lock:
            if key in self._states or self._stop.is_set():
                return
            self._states[key] = SearchState(package.name, package.manifest.version, "waiting")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="select-fastest", daemon=True)
                self._thread.start()
        log.info(
            "model %s %s: no choice measured on this box yet; measuring every way to run it (select: fastest), "
            "running the profile's choice meanwhile",
            package.name,
            package.manifest.version,
        )
        self._queue.put(_Request(key, package, overrides, hint, tolerance))

    def describe(self) -> dict[str, dict[str, Any]]:
        """Each searched package by key: its name, version, state and, once chosen, the figures."""
        with self._lock:
            return {key: state.to_dict() for key, state in self._states.items()}

    def close(self, timeout: float = 10.0) -> None:
        """Stop between two timing rounds; a search cut short stores nothing and runs again at the next start."""
        self._stop.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while (request := self._queue.get()) is not None and not self._stop.is_set():
            try:
                self._measure(request)
            except Exception as error:  # a backend failing in a way it does not name must not end the thread
                log.exception("model %s: measuring its choices failed", request.package.name)
                self._set(request.key, "failed", f"measuring failed: {error}")

    def _measure(self, request: _Request) -> None:
        package = request.package
        while self.held_off():
            if self._stop.wait(1.0):
                return
        self._set(request.key, "measuring")
        candidates = every_runnable_choice(package, self.box.hardware, request.overrides)
        results = measure_choices(
            package,
            candidates,
            hint=request.hint,
            seconds=self.seconds,
            rounds=self.rounds,
            tolerance=request.tolerance,
            stop=self._stop,
        )
        if self._stop.is_set():
            return
        best = store_fastest(package, results, request.hint, self.state_dir, "select: fastest")
        if best is None:
            refused = "; ".join(f"{r.label} {r.candidate.variant_id}: {r.error or 'outside the tolerance'}"
                                for r in results if not r.usable)  # fmt: skip
            self._set(request.key, "failed", f"no choice ran within the tolerance ({refused or 'none runnable'})")
            log.warning("model %s: select: fastest found no faithful choice; keeping the profile's", package.name)
            return
        figures = best.metrics()
        detail = f"{best.label} {best.candidate.variant_id}"
        self._set(request.key, "chosen", detail, figures)
        log.info(
            "model %s: fastest faithful choice on this box is %s (median %.3f ms, %d candidates measured)",
            package.name,
            detail,
            figures["median_ms"],
            len(results),
        )
        self.on_chosen(request.key)

    def _set(self, key: str, state: Any, detail: str = "", figures: dict[str, float] | None = None) -> None:
        with self._lock:
            entry = self._states[key]
            entry.state, entry.detail, entry.figures = state, detail, dict(figures or {})
