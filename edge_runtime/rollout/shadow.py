"""The shadow step: a new model runs beside the old one on the same live items before it may take over.

A model that loaded and passed the converter's checks can still be wrong for this box: slower on its
device, broken by this backend version, decoding this camera's frames into errors. So before the
switch the new model sees the pipeline's own items, taken from the feed thread through a tap that never
blocks it (a full shadow queue skips the item: the live pipeline comes first). On a thread of its own
the shadow runs each taken item through the new model and through the old one the same way,
synchronously, in alternating order, so their latencies compare like with like on the same inputs. It passes when
- the new model stays within its fidelity tolerance of its own fp32 variant (checked once, first),
- every item it ran decoded without an error, and
- its median latency is at most `max_latency_ratio` times the old model's.
Its results are never published; the summary is what the rollout reports.
"""

from __future__ import annotations

import logging
import queue
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edge_runtime.decoders.base import Decoder
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.manifest import InputSpec
from edge_runtime.pipeline.preprocess import preprocessor_for
from edge_runtime.pipeline.streaming import Pipeline
from edge_runtime.placement.model import LoadedModel
from edge_runtime.sources.base import Frame, Item

__all__ = ["ShadowLimits", "ShadowSummary", "fidelity_of", "run_shadow"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShadowLimits:
    items: int = 50  # items the new model must run before it is judged
    max_seconds: float = 120.0  # judged on what it ran by then, if fewer items came
    min_items: int = 5  # fewer than this by the deadline is a failure: nothing to judge on
    max_latency_ratio: float = 1.5
    fidelity_tolerance: float = 0.05  # largest output error against the fp32 variant, a fraction of the range


@dataclass(frozen=True)
class ShadowSummary:
    items: int
    skipped: int  # items the tap passed over because the shadow was busy
    failed_items: int
    new_latency_ms: float | None
    old_latency_ms: float | None
    fidelity_error: float | None
    passed: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_shadow(
    pipeline: Pipeline,
    new_model: LoadedModel,
    new_decoder: Decoder,
    new_spec: InputSpec,
    limits: ShadowLimits,
    stop: threading.Event | None = None,
) -> ShadowSummary:
    """Run `new_model` in the shadow of `pipeline` until the limits say, and judge it; blocks meanwhile."""
    fidelity_error, failure = fidelity_of(new_model, limits.fidelity_tolerance)
    if failure is not None:
        return ShadowSummary(0, 0, 0, None, None, fidelity_error, False, failure)
    shadow = _Shadow(pipeline, new_model, new_decoder, new_spec)
    pipeline.add_tap(shadow.offer)
    try:
        deadline = time.monotonic() + limits.max_seconds
        while shadow.ran < limits.items and time.monotonic() < deadline and not (stop and stop.is_set()):
            if pipeline.finished.is_set() and shadow.idle():
                break
            shadow.step(timeout=0.2)
    finally:
        pipeline.remove_tap(shadow.offer)
    return shadow.judge(limits, fidelity_error)


def fidelity_of(model: LoadedModel, tolerance: float) -> tuple[float | None, str | None]:
    """The model's largest output error against its own fp32 variant, and why that fails, if it does."""
    from edge_runtime.measure.fidelity import compare, load_reference

    try:
        reference = load_reference(model.package, model.variant_id)
    except EdgeRuntimeError as error:
        return None, f"its fidelity cannot be checked: {error}"
    try:
        report = compare(model, reference, tolerance=tolerance)
    except EdgeRuntimeError as error:
        return None, f"its fidelity check failed to run: {error}"
    finally:
        reference.close()
    if not report.passed:
        return report.max_rel_error, (
            f"its outputs lie {100 * report.max_rel_error:.2g}% of their range from its fp32 variant "
            f"(at most {100 * tolerance:.2g}% allowed)"
        )
    return report.max_rel_error, None


class _Shadow:
    def __init__(self, pipeline: Pipeline, model: LoadedModel, decoder: Decoder, spec: InputSpec) -> None:
        self.pipeline = pipeline
        self.model = model
        self.decoder = decoder
        self._preprocess = preprocessor_for(spec, model.inputs[0])
        old = pipeline.model
        self._old_preprocess = preprocessor_for(old.input_specs[0], old.inputs[0])
        self._items: queue.Queue[Item] = queue.Queue(maxsize=1)
        self.ran = 0
        self.skipped = 0
        self.failed_items = 0
        self.first_error = ""
        self.new_ms: list[float] = []
        self.old_ms: list[float] = []

    def offer(self, item: Item) -> None:
        """The tap, on the pipeline's feed thread: take the item if the shadow is free, else skip it."""
        try:
            self._items.put_nowait(item)
        except queue.Full:
            self.skipped += 1

    def idle(self) -> bool:
        return self._items.empty()

    def step(self, timeout: float) -> None:
        try:
            item = self._items.get(timeout=timeout)
        except queue.Empty:
            return
        data = item.image if isinstance(item, Frame) else item.samples
        tensor, transform = self._preprocess(data)
        self.ran += 1
        old_first = self.ran % 2 == 0  # alternate which runs first, so neither always finds the caches warm
        if old_first:
            self._time_old(data)
        started = time.perf_counter()
        try:
            outputs = self.model.infer([tensor])
        except Exception as error:
            self._failed(f"inference failed: {error}")
            return
        self.new_ms.append((time.perf_counter() - started) * 1000)
        if not old_first:
            self._time_old(data)
        try:
            self.decoder.decode(outputs, self.model.outputs, transform)
        except Exception as error:
            self._failed(f"decoding failed: {type(error).__name__}: {error}")

    def _time_old(self, data: np.ndarray) -> None:
        old = self.pipeline.model
        tensor, _ = self._old_preprocess(data)
        started = time.perf_counter()
        try:
            old.infer([tensor])
        except Exception:
            return  # the old model's own troubles are the pipeline's to report
        self.old_ms.append((time.perf_counter() - started) * 1000)

    def _failed(self, why: str) -> None:
        self.failed_items += 1
        if not self.first_error:
            self.first_error = why
            log.warning("shadow of %s: %s", self.model.label, why)

    def judge(self, limits: ShadowLimits, fidelity_error: float | None) -> ShadowSummary:
        new = statistics.median(self.new_ms) if self.new_ms else None
        old = statistics.median(self.old_ms) if self.old_ms else None

        def summary(passed: bool, reason: str) -> ShadowSummary:
            return ShadowSummary(
                self.ran,
                self.skipped,
                self.failed_items,
                None if new is None else round(new, 3),
                None if old is None else round(old, 3),
                fidelity_error,
                passed,
                reason,
            )

        if self.failed_items:
            reason = f"{self.failed_items} of {self.ran} items failed in the new model; the first: {self.first_error}"
            return summary(False, reason)
        if self.ran < limits.min_items:
            wanted = f"at least {limits.min_items} needed"
            reason = f"only {self.ran} items reached the shadow in {limits.max_seconds:.0f} s ({wanted})"
            return summary(False, reason)
        if new is not None and old is not None and new > limits.max_latency_ratio * old:
            reason = (
                f"the new model takes {new:.1f} ms per item against the old one's {old:.1f} ms "
                f"(at most {limits.max_latency_ratio:.2f}× allowed)"
            )
            return summary(False, reason)
        return summary(True, f"{self.ran} items ran in the shadow without a fault")
