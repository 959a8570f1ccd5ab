"""Whether a served model's requests are joined into batches: only where that is sound, and where it pays.

Sound: every input and output must keep the batch as its first dimension, and a batch of two must
give each sample the answer it gets alone. Backends free the batch dimension of a model exported with
a batch of one (OpenVINO reshapes, ONNX Runtime names the dimension, LiteRT resizes), but a graph
that folds the batch into another dimension (a Reshape to a constant [1, -1], as some TFLite
detectors have) only shows it when a batch runs, so one runs here before any request does.

Pays: on a GPU a batch of eight costs little more than one sample, but on a small CPU a backend that
keeps several single requests in flight (OpenVINO's throughput streams, ONNX Runtime's and LiteRT's
workers) often keeps the cores as busy, and then a batch only adds the wait for it to fill. So, unless
the config says `batch_when: always`, both are measured on this box, alternately, with an async runner
kept full: batches on the model with its batch freed, single requests on the model as exported (a freed
batch dimension makes a backend pick kernels for any shape, slower for a batch of one). Batches are
chosen only when they beat single requests by BATCH_MARGIN, enough to stay above the run-to-run noise
of a shared box. The figures are stored in the state directory under the model's files, backend,
device and batch size, so later starts reuse them, and `probe` shows them.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np

from edge_runtime.backends.base import Outputs, TensorSpec
from edge_runtime.backends.host import cpu_name
from edge_runtime.measure.store import MeasurementStore, measurement_key
from edge_runtime.placement.model import LoadedModel

__all__ = ["BATCH_MARGIN", "BatchChoice", "BatchChoices", "batch_problem", "fixed_batch"]

log = logging.getLogger(__name__)

CHOICES_FILE = "batching-choices.json"
CHOICES_VERSION = 2  # 2: single requests measured on the model as exported
BATCH_MARGIN = 1.10  # batches must run this much faster than single requests to be chosen
ROUNDS = 3  # each side measured this often, alternately; the medians are compared
PHASE_SECONDS = 0.3  # each side runs at least this long per round
PHASE_MIN_BATCHES = 3  # and at least this many batches, so a slow model still gets a figure

BatchWhen = Literal["faster", "always"]
HOW_LOADED = ("cache_dir", "loaded_from_cache")  # backend details that differ between two starts of one model


@dataclass(frozen=True)
class Throughputs:
    """Samples per second measured on this box: joined into batches, and as single requests in flight."""

    batch_size: int
    batched: float
    single: float
    measured_at: str

    @property
    def ratio(self) -> float:
        return self.batched / self.single if self.single > 0 else float("inf")


@dataclass(frozen=True)
class BatchChoice:
    """How requests run: `max_batch_size` 0 means each on its own, several in flight; `reason` says why."""

    max_batch_size: int
    reason: str
    measured: Throughputs | None = None
    unsound: bool = False  # the model cannot take batches: serve it with the shapes it was exported with

    def to_dict(self) -> dict[str, Any]:
        choice: dict[str, Any] = {"max_batch_size": self.max_batch_size, "reason": self.reason}
        if self.measured is not None:
            choice["measured"] = asdict(self.measured) | {"ratio": round(self.measured.ratio, 3)}
        return choice


class BatchChoices:
    """Decides, measures and remembers how each served model's requests run; see the module docstring."""

    def __init__(self, state_dir: Path | None) -> None:
        self.store = MeasurementStore(state_dir, CHOICES_FILE, CHOICES_VERSION, "batching choices")

    def choose(
        self, model: LoadedModel, wanted: int, when: BatchWhen = "faster", single: LoadedModel | None = None
    ) -> BatchChoice:
        """How `model` (its batch dimension freed) runs requests; `single` is the model as exported, on which
        single requests would run instead, and are measured (default: `model` itself)."""
        if wanted <= 1:
            return BatchChoice(0, "max_batch_size is 0 or 1: each request runs on its own, several in flight")
        if (fixed := fixed_batch(model)) is not None:
            return BatchChoice(0, f"cannot be batched: {fixed}", unsound=True)
        if (problem := batch_problem(model)) is not None:
            return BatchChoice(0, f"cannot be batched: {problem}", unsound=True)
        if when == "always":
            return BatchChoice(wanted, f"batches of up to {wanted}, as configured (batch_when: always)")
        key = self.key(model, wanted)
        measured = self.stored(key)
        if measured is None:
            measured = measure_throughputs(model, wanted, single=single)
            self.store.put(key, asdict(measured) | {"model": f"{model.package.name} {model.label}"})
        figures = f"batches of {wanted}: {measured.batched:.1f}/s, single requests: {measured.single:.1f}/s"
        if measured.ratio >= BATCH_MARGIN:
            return BatchChoice(wanted, f"batches pay here ({figures})", measured)
        return BatchChoice(0, f"batches do not pay here ({figures}); requests run side by side", measured)

    def stored(self, key: str) -> Throughputs | None:
        entry = self.store.get(key)
        return None if entry is None else _throughputs(entry)

    def remembered(self) -> list[tuple[str, Throughputs]]:
        """Every stored measurement, with the model it was made on, for `probe`."""
        found = []
        for entry in self.store.entries():
            measured = _throughputs(entry)
            if measured is not None:
                found.append((str(entry.get("model", "a model")), measured))
        return found

    @staticmethod
    def key(model: LoadedModel, wanted: int) -> str:
        runs_on = model.backend.runs_on
        variant = model.package.manifest.variants[model.variant_id]
        identity = {
            "files": [f.sha256 for f in variant.files],
            "backend": runs_on.backend,
            "device": runs_on.device,
            "precision": runs_on.precision,
            # what shapes the speed (hint, streams, threads), not how this start got the compiled model
            "details": {k: v for k, v in runs_on.details.items() if k not in HOW_LOADED},
            "batch": wanted,
            "cpu": cpu_name(),
        }
        return measurement_key(identity)


def fixed_batch(model: LoadedModel) -> str | None:
    """Which tensor of the loaded model fixes its first dimension, if any."""
    for kind, tensors in (("input", model.inputs), ("output", model.outputs)):
        for tensor in tensors:
            if not tensor.shape or tensor.shape[0] is not None:
                return f"its {kind} {tensor.name} has the fixed shape {list(tensor.shape)}"
    return None


def batch_problem(model: LoadedModel) -> str | None:
    """Why a batch of two does not give each sample the answer it gets alone, or None when it does."""
    rng = np.random.default_rng(0)
    first, second = _sample(model.inputs, rng), _sample(model.inputs, rng)
    try:
        alone = [model.infer(first), model.infer(second)]
        joined = model.infer([np.concatenate(pair) for pair in zip(first, second, strict=True)])
    except Exception as error:
        return f"a batch of two fails: {type(error).__name__}: {str(error).strip().splitlines()[0][:200]}"
    for position, (spec, together) in enumerate(zip(model.outputs, joined, strict=True)):
        if np.shape(together)[:1] != (2,):
            return f"a batch of two gives output {spec.name} the shape {list(np.shape(together))}"
        for row, single in enumerate(alone):
            if not _same_answer(together[row : row + 1], single[position], spec):
                return f"a batch of two changes output {spec.name} of sample {row}: the graph mixes the samples"
    return None


def measure_throughputs(
    model: LoadedModel,
    batch: int,
    rounds: int = ROUNDS,
    seconds: float = PHASE_SECONDS,
    single: LoadedModel | None = None,
) -> Throughputs:
    """Samples per second through an async runner kept full, batches on `model` and single requests on
    `single` (default: `model`), alternately: `rounds` of each, every phase at least `seconds` long."""
    rng = np.random.default_rng(0)
    one = _sample(model.inputs, rng)
    joined = [np.concatenate([array] * batch) for array in one]
    runs = {1: (single or model, one), batch: (model, joined)}
    rates: dict[int, list[float]] = {1: [], batch: []}
    for _ in range(rounds):
        for size, (runs_on, inputs) in runs.items():
            rates[size].append(_samples_per_second(runs_on, inputs, size, seconds))
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    measured = Throughputs(batch, statistics.median(rates[batch]), statistics.median(rates[1]), now)
    log.info(
        "%s: batches of %d run %.1f samples/s, single requests %.1f/s on this box (%.2f×)",
        model.label,
        batch,
        measured.batched,
        measured.single,
        measured.ratio,
    )
    return measured


def _throughputs(entry: dict[str, Any]) -> Throughputs | None:
    try:
        return Throughputs(
            int(entry["batch_size"]), float(entry["batched"]), float(entry["single"]), str(entry["measured_at"])
        )
    except (KeyError, TypeError, ValueError):
        return None


def _samples_per_second(model: LoadedModel, inputs: list[np.ndarray], size: int, seconds: float) -> float:
    finished = 0
    failure: list[BaseException] = []
    lock = threading.Lock()
    idle = threading.Condition(lock)
    in_flight = 0

    def done(userdata: Any, outputs: Outputs | None, error: BaseException | None) -> None:
        nonlocal finished, in_flight
        with lock:
            finished += 1
            in_flight -= 1
            if error is not None:
                failure.append(error)
            idle.notify_all()

    runner = model.backend.async_runner(done)
    try:
        started = time.perf_counter()
        submitted = 0
        while time.perf_counter() - started < seconds or submitted < PHASE_MIN_BATCHES:
            with lock:
                in_flight += 1
            runner.submit(inputs, None)  # blocks while the runner is full
            submitted += 1
        with idle:
            idle.wait_for(lambda: in_flight == 0, timeout=60)
        elapsed = time.perf_counter() - started
    finally:
        runner.close()
    if failure:
        raise failure[0]
    return finished * size / elapsed


def _sample(specs: list[TensorSpec], rng: np.random.Generator) -> list[np.ndarray]:
    """One sample per input, random over the input's type, with any free dimension other than the batch as 1."""
    arrays = []
    for spec in specs:
        shape = [1, *(d or 1 for d in spec.shape[1:])]
        dtype = np.dtype(spec.dtype)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            arrays.append(rng.integers(max(info.min, 0), min(info.max, 255), shape, endpoint=True).astype(dtype))
        else:
            arrays.append(rng.random(shape, dtype=np.float32).astype(dtype))
    return arrays


def _same_answer(together: np.ndarray, alone: np.ndarray, spec: TensorSpec) -> bool:
    """Equal up to another summation order: 1% of the output's range, plus one step of a quantized output.

    Batched kernels block their loops differently from single ones, so sums may round apart, by a few
    units in the last place of fp16 on a GPU; a graph that mixes samples moves outputs by a large part
    of their range, far beyond this.
    """
    if together.shape != alone.shape:
        return False
    wide_together, wide_alone = together.astype(np.float64), alone.astype(np.float64)
    span = float(np.max(wide_alone) - np.min(wide_alone)) if alone.size else 0.0
    scale = max(span, float(np.max(np.abs(wide_alone), initial=0.0)))
    allowed = 1e-2 * scale + 1e-6 + (1.0 if spec.quantization is not None else 0.0)
    return bool(np.all(np.abs(wide_together - wide_alone) <= allowed))
