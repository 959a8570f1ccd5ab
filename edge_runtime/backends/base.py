"""The one narrow interface every accelerator backend implements.

A backend module (one per library: OpenVINO, LiteRT, ONNX Runtime) defines an options class and a
`Backend` subclass. The rest of the runtime only ever sees this interface: load a model file on a
device, describe its tensors, run it synchronously or with a bounded number of requests in flight,
and say what it actually runs on. Backend libraries are imported inside the backend's methods, never
at module import, so a box without one of them can still use the others.
"""

from __future__ import annotations

import logging
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

import numpy as np
from pydantic import Field

from edge_runtime.config.base import StrictModel
from edge_runtime.package.manifest import ModelFormat, Precision

if TYPE_CHECKING:
    from edge_runtime.hardware.facts import Hardware

Outputs = list[np.ndarray]
Callback = Callable[[Any, Outputs | None, BaseException | None], None]


@dataclass(frozen=True)
class Quantization:
    """Affine quantization of a tensor: real = scale * (q - zero_point)."""

    scale: float
    zero_point: int


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int | None, ...]  # None marks a dynamic dimension
    dtype: str  # numpy dtype name, e.g. "float32", "uint8"
    quantization: Quantization | None = None


@dataclass(frozen=True)
class ModelSource:
    """A model file ready to load, as resolved from a model package or a bare file."""

    path: Path
    format: ModelFormat
    precision: Precision
    variant_id: str
    sha256: str
    target: str | None = None


@dataclass(frozen=True)
class RunsOn:
    """What a loaded model really runs on, as reported by the backend library after loading."""

    backend: str
    device: str  # what was asked for and granted, e.g. "CPU", "GPU.0", "CUDAExecutionProvider"
    device_name: str  # the library's full name for it, e.g. "Intel(R) Core(TM) Ultra 7 155H"
    precision: str  # the precision inference actually runs at, e.g. "fp32", "int8"
    details: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BackendStatus:
    """Result of probing a backend: can its library be imported, and which devices does it see."""

    backend: str
    available: bool
    version: str | None = None
    devices: tuple[str, ...] = ()
    device_names: dict[str, str] = field(default_factory=dict)
    reason: str = ""  # why it is unavailable, or which fallback library was used


class BackendOptions(StrictModel):
    """Options every backend understands; each backend extends this with its own typed fields."""

    device: str = "CPU"
    precision: Precision | None = Field(
        default=None,
        description="Precision to run at; None runs the variant at its own precision, never lower.",
    )
    threads: int | None = Field(default=None, ge=1, description="Inference threads; None means all cores.")
    hint: Literal["latency", "throughput"] = "latency"
    max_in_flight: int | None = Field(
        default=None, ge=1, description="Requests in flight in async mode; None asks the backend."
    )
    cache_dir: Path | None = Field(default=None, description="Where compiled models and engines are kept.")
    dynamic_batch: bool = Field(
        default=False,
        description="Free the first dimension of every input and output so requests can run as one batch, where "
        "the backend can: OpenVINO reshapes the model, ONNX Runtime names the dimension, LiteRT resizes its inputs. "
        "Devices that need static shapes (NPU, Edge TPU, TensorRT engines) keep the model's own.",
    )


OptionsT = TypeVar("OptionsT", bound=BackendOptions)

log = logging.getLogger(__name__)


def options_as(options_type: type[OptionsT], options: BackendOptions) -> OptionsT:
    """`options` as a backend's own options class, for a backend built directly with plain BackendOptions.

    Only the fields the caller set carry over, so the backend's own defaults still apply to the rest.
    """
    if isinstance(options, options_type):
        return options
    return options_type.model_validate(options.model_dump(exclude_unset=True))


class AsyncRunner(ABC):
    """Runs inferences with at most `capacity` in flight; results arrive through the callback.

    `submit` blocks while the runner is full, which is the backpressure a pipeline wants: the source
    slows down instead of queueing frames without bound. A caller that must not block (an event loop)
    uses `try_submit` instead, and sets `on_idle` to hear when a slot comes free.
    """

    capacity: int
    on_idle: Callable[[], None] | None = None  # called on the runner's thread each time a slot comes free

    @abstractmethod
    def submit(self, inputs: Sequence[np.ndarray], userdata: Any = None) -> None:
        """Start one request. The runner may read `inputs` in place until the request's callback has
        run, so the caller must not write into those arrays before then (pass a fresh array per frame)."""

    @abstractmethod
    def try_submit(self, inputs: Sequence[np.ndarray], userdata: Any = None) -> bool:
        """Start one request only if a slot is idle, never waiting: False (nothing started) while all are busy."""

    @abstractmethod
    def wait_all(self) -> None: ...

    def close(self) -> None:
        self.wait_all()


class ThreadedAsyncRunner(AsyncRunner):
    """Async runner for libraries without their own async API: one worker thread per run function.

    Each worker owns its run function (for LiteRT a private interpreter, since an interpreter is not
    thread-safe; for ONNX Runtime a bound `session.run`, which releases the GIL).
    """

    def __init__(self, run_functions: Sequence[Callable[[Sequence[np.ndarray]], Outputs]], callback: Callback):
        self.capacity = len(run_functions)
        self._callback = callback
        self._slots = threading.Semaphore(self.capacity)
        self._jobs: queue.SimpleQueue[tuple[Sequence[np.ndarray], Any] | None] = queue.SimpleQueue()
        self._pending = 0
        self._closed = False
        self._idle = threading.Condition()
        self._threads = [
            threading.Thread(target=self._work, args=(run,), name=f"infer-{i}", daemon=True)
            for i, run in enumerate(run_functions)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, inputs: Sequence[np.ndarray], userdata: Any = None) -> None:
        """Raises RuntimeError after `close`: no worker is left to run the job."""
        self._slots.acquire()
        self._start(inputs, userdata)

    def try_submit(self, inputs: Sequence[np.ndarray], userdata: Any = None) -> bool:
        if not self._slots.acquire(blocking=False):
            return False
        self._start(inputs, userdata)
        return True

    def _start(self, inputs: Sequence[np.ndarray], userdata: Any) -> None:
        """Hand the job to a worker, a slot already taken."""
        with self._idle:
            if self._closed:
                self._slots.release()
                raise RuntimeError("the runner is closed")
            self._pending += 1
        self._jobs.put((inputs, userdata))

    def wait_all(self) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0)

    def close(self) -> None:
        with self._idle:
            self._closed = True
        self.wait_all()
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()

    def _work(self, run: Callable[[Sequence[np.ndarray]], Outputs]) -> None:
        while (job := self._jobs.get()) is not None:
            inputs, userdata = job
            try:
                outputs, error = run(inputs), None
            except Exception as exc:
                outputs, error = None, exc
            try:
                self._callback(userdata, outputs, error)
            finally:
                self._slots.release()
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()
                idle_hook(self.on_idle)


def idle_hook(on_idle: Callable[[], None] | None) -> None:
    """Call a runner's `on_idle`, if set; what it raises is logged, since no caller is there to take it."""
    if on_idle is None:
        return
    try:
        on_idle()
    except Exception:
        log.exception("a runner's idle hook failed")


class Backend(ABC):
    """A model loaded on one device of one backend library.

    Subclasses set `key` and `options_type`, implement `probe` (cheap, safe to call on any box) and the
    loading constructor, and fill `inputs`, `outputs` and `runs_on`. Which formats a backend loads is in
    its record in the registry (`edge_runtime.backends.BACKENDS`).
    """

    key: ClassVar[str]
    options_type: ClassVar[type[BackendOptions]] = BackendOptions
    reads_hint: ClassVar[bool] = False  # whether the `hint` option (latency or throughput) changes anything

    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    runs_on: RunsOn

    @classmethod
    @abstractmethod
    def probe(cls) -> BackendStatus:
        """Import the library and list devices; never raises."""

    @classmethod
    def device_problem(
        cls, device: str, delegate: str | None, options: Mapping[str, Any], status: BackendStatus, hardware: Hardware
    ) -> str | None:
        """Why the library cannot use `device` (with `delegate`) on this box, read from its probe; None if it can.

        Detection says what is plugged in; the library's status says what it can open. Where a device is
        plugged in but not usable, the reason names the usual culprit.
        """
        return None

    @classmethod
    def device_name(
        cls, device: str, delegate: str | None, options: Mapping[str, Any], status: BackendStatus
    ) -> str | None:
        """The library's own name for the device, e.g. "Intel(R) AI Boost" for OpenVINO's NPU."""
        return status.device_names.get(device)

    @classmethod
    def measurable_choices(cls, status: BackendStatus, hardware: Hardware) -> list[dict[str, Any]]:
        """Every device, delegate, options and precision `bench --select` measures here, as choice fields."""
        return [{"device": device, "precision": None} for device in status.devices]

    @abstractmethod
    def __init__(self, source: ModelSource, options: BackendOptions) -> None:
        """Load and compile `source` on `options.device`; raises ModelLoadError or BackendUnavailableError."""

    @abstractmethod
    def infer(self, inputs: Sequence[np.ndarray]) -> Outputs:
        """Run one request; inputs and outputs are ordered as `self.inputs` and `self.outputs`."""

    @abstractmethod
    def async_runner(self, callback: Callback, max_in_flight: int | None = None) -> AsyncRunner:
        """A runner keeping up to `max_in_flight` requests busy (None: what the backend finds optimal)."""

    def close(self) -> None:  # noqa: B027 - optional hook, most backends free resources on collection
        """Release the device; the object must not be used afterwards."""
