"""LiteRT (TensorFlow Lite) backend: the CPU through XNNPACK, a Coral Edge TPU, or a GPU/external delegate.

A model runs with one delegate. The delegate named in the options is tried first, then each fallback:
an accelerator's library can be missing on a box that still runs the model well on the CPU, and a
delegate that loads can still fail to prepare a model (XNNPACK cannot prepare int8 weights stored
sparse), which the built-in kernels run. Either failure is logged and kept in
`runs_on.details["fallback"]` rather than stopping the daemon. Models compiled for the Edge TPU
(`*_edgetpu.tflite`) are the exception: the CPU cannot run them correctly, so they are refused instead.

The interpreter comes from `ai_edge_litert`, else `tflite_runtime`, else `tensorflow`, imported on
first use so that importing this module needs none of them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from edge_runtime.backends.base import (
    AsyncRunner,
    Backend,
    BackendOptions,
    BackendStatus,
    Callback,
    ModelSource,
    Outputs,
    Quantization,
    RunsOn,
    TensorSpec,
    ThreadedAsyncRunner,
    options_as,
)
from edge_runtime.backends.host import available_cores, cpu_name
from edge_runtime.backends.litert.delegates import (
    DelegateChoice,
    DelegateError,
    DelegateName,
    LiteRtOptions,
    delegate_choices,
    edgetpu_devices,
    edgetpu_library,
    edgetpu_name,
    edgetpu_prefix,
    edgetpu_problem,
    plugin_problem,
)
from edge_runtime.backends.litert.interpreter import import_interpreter, interpreter_library
from edge_runtime.errors import BackendUnavailableError, ModelLoadError, ModelMismatchError

if TYPE_CHECKING:
    from edge_runtime.hardware.facts import Hardware

__all__ = ["LiteRtBackend", "LiteRtOptions", "edgetpu_library", "import_interpreter"]

log = logging.getLogger(__name__)

_MODEL_FILE_SIGNS = ("not a valid Flatbuffer", "Could not open", "allocation is null")


class _Session:
    """One interpreter with its tensor indices worked out once, so a call does no lookups.

    Inputs with a dynamic dimension are resized to each call's arrays. With `free_batch`, so is the first
    dimension of every input of a model exported with a fixed batch: LiteRT resizes a fixed dimension
    when asked without `strict`, and whether the graph keeps the batch apart shows when a batch runs.
    """

    def __init__(self, interpreter: Any, model_name: str, free_batch: bool = False) -> None:
        interpreter.allocate_tensors()
        self._model_name = model_name
        inputs = interpreter.get_input_details()
        self._interpreter = interpreter
        self._indices = [d["index"] for d in inputs]
        self._outputs = [d["index"] for d in interpreter.get_output_details()]
        self._strict = not free_batch
        self._dynamic = {
            position: tuple(int(n) for n in d["shape"])
            for position, d in enumerate(inputs)
            if -1 in d.get("shape_signature", ()) or (free_batch and len(d["shape"]))
        }
        self._set, self._invoke, self._get = interpreter.set_tensor, interpreter.invoke, interpreter.get_tensor
        if self._dynamic:
            self._finish_preparing(inputs)

    def _finish_preparing(self, inputs: list[dict[str, Any]]) -> None:
        """Run once on zeros: with dynamic shapes, delegated ops are prepared at the first invoke, not at allocation.

        A delegate that cannot prepare the model then fails here, while loading, where the next one can take over.
        """
        for detail in inputs:
            self._set(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
        self._invoke()

    def run(self, inputs: Sequence[np.ndarray]) -> Outputs:
        if len(inputs) != len(self._indices):
            raise ModelMismatchError(f"{self._model_name} takes {len(self._indices)} inputs, got {len(inputs)}")
        try:
            if self._dynamic:
                self._resize(inputs)
            for index, value in zip(self._indices, inputs, strict=False):
                self._set(index, value)
        except ValueError as exc:
            raise ModelMismatchError(f"input does not fit {self._model_name}: {exc}") from exc
        self._invoke()
        get = self._get
        return [get(index) for index in self._outputs]  # get_tensor returns a copy

    def _resize(self, inputs: Sequence[np.ndarray]) -> None:
        changed = False
        for position, shape in self._dynamic.items():
            wanted = tuple(np.shape(inputs[position]))
            if wanted != shape:
                self._interpreter.resize_tensor_input(self._indices[position], wanted, strict=self._strict)
                self._dynamic[position] = wanted
                changed = True
        if changed:
            self._interpreter.allocate_tensors()


class LiteRtBackend(Backend):
    key = "litert"
    options_type = LiteRtOptions

    @classmethod
    def device_problem(
        cls, device: str, delegate: str | None, options: Mapping[str, Any], status: BackendStatus, hardware: Hardware
    ) -> str | None:
        """The CPU kernels are always there; gpu and external delegates are known only by loading them."""
        if delegate != "edgetpu":
            return None
        return edgetpu_problem(str(options.get("edgetpu_device", "")), status, hardware.delegate_libraries)

    @classmethod
    def device_name(
        cls, device: str, delegate: str | None, options: Mapping[str, Any], status: BackendStatus
    ) -> str | None:
        names = status.device_names
        if delegate != "edgetpu":
            return names.get("cpu")
        prefix = edgetpu_prefix(str(options.get("edgetpu_device", "")))
        return next((name for key, name in names.items() if key.startswith(prefix)), None)

    @classmethod
    def measurable_choices(cls, status: BackendStatus, hardware: Hardware) -> list[dict[str, Any]]:
        return [{**fields, "precision": None} for fields in delegate_choices(status.devices)]

    @classmethod
    def probe(cls) -> BackendStatus:
        try:
            library = interpreter_library()
            devices = {"cpu": cpu_name()}
            notes = [f"using {library.label}", *library.passed_over] if library.passed_over else []
            edgetpus = edgetpu_devices()
            problem = plugin_problem(edgetpu_library()) if edgetpus else None
            if problem is not None:
                notes.append(f"Edge TPU found but {problem}")
            elif edgetpus:
                devices.update({f"edgetpu:{d}": edgetpu_name(d) for d in edgetpus})
            return BackendStatus(cls.key, True, library.version, tuple(devices), devices, "; ".join(notes))
        except Exception as exc:
            return BackendStatus(cls.key, False, reason=str(exc))

    def __init__(self, source: ModelSource, options: BackendOptions) -> None:
        self._source = source
        self._options = options_as(LiteRtOptions, options)
        self._threads = self._options.threads or available_cores()
        self._library = interpreter_library()
        if not source.path.is_file():
            raise ModelLoadError(f"LiteRT model file {source.path} does not exist")
        self._free_batch = self._options.dynamic_batch and not self._edgetpu_only
        interpreter, self._session, self._choice, failures = self._open()
        self.inputs = _specs(interpreter.get_input_details(), self._free_batch)
        self.outputs = _specs(interpreter.get_output_details(), self._free_batch)
        self.runs_on = self._describe(interpreter, failures)

    def infer(self, inputs: Sequence[np.ndarray]) -> Outputs:
        return self._session.run(inputs)

    def async_runner(self, callback: Callback, max_in_flight: int | None = None) -> AsyncRunner:
        """N private interpreters (an interpreter is not thread-safe), sharing the threads between them."""
        count = max_in_flight or self._options.max_in_flight or 2
        threads = max(1, self._threads // count)
        name = self._source.path.name
        sessions = [_Session(self._spawn(threads), name, self._free_batch) for _ in range(count)]
        return ThreadedAsyncRunner([session.run for session in sessions], callback)

    def close(self) -> None:
        self.__dict__.pop("_session", None)  # frees the interpreter, then its delegate and device

    def _open(self) -> tuple[Any, _Session, DelegateChoice, list[str]]:
        """The first delegate in the fallback order that loads and prepares the model."""
        edgetpu_only = self._edgetpu_only
        name = self._source.path.name
        if edgetpu_only and self._options.delegate != "edgetpu":
            raise BackendUnavailableError(
                f"{name} is compiled for the Edge TPU and runs only with delegate 'edgetpu', "
                f"not {self._options.delegate!r}; use a CPU variant of the model"
            )
        order: list[DelegateName] = ["edgetpu"] if edgetpu_only else [self._options.delegate, *self._options.fallback]
        failures: list[str] = []
        unprepared = False
        for delegate in dict.fromkeys(order):
            choice = DelegateChoice.of(delegate, self._options)
            try:
                interpreter = self._interpreter(choice, choice.load(self._library), self._threads)
            except DelegateError as exc:
                failures.append(f"delegate {delegate} ({choice.library}) failed: {exc}")
                log.warning("LiteRT %s: %s", name, failures[-1])
                continue
            try:
                return interpreter, _Session(interpreter, name, self._free_batch), choice, failures
            except (ValueError, RuntimeError) as exc:
                unprepared = True
                failures.append(f"{_describe_choice(choice)} could not prepare the model: {_one_line(exc)}")
                log.warning("LiteRT %s: %s", name, failures[-1])
        if unprepared:
            raise ModelLoadError(f"LiteRT cannot prepare {self._source.path}: {'; '.join(failures)}")
        refusal = "; Edge TPU models never run on the CPU" if edgetpu_only else ""
        raise BackendUnavailableError(f"LiteRT cannot run {name}: {'; '.join(failures)}{refusal}")

    @property
    def _edgetpu_only(self) -> bool:
        """A model compiled for the Edge TPU, whose shapes are fixed in the compiled graph."""
        return self._source.target == "edgetpu" or self._source.path.stem.endswith("_edgetpu")

    def _interpreter(self, choice: DelegateChoice, delegate: Any, threads: int) -> Any:
        path = self._source.path
        try:
            return self._library.create(delegate, threads, choice.name != "none", model_path=str(path))
        except Exception as exc:
            if delegate is None or any(sign in str(exc) for sign in _MODEL_FILE_SIGNS):
                raise ModelLoadError(f"LiteRT cannot load {path}: {exc}") from exc
            raise DelegateError(f"it could not take the model: {exc}") from exc

    def _spawn(self, threads: int) -> Any:
        try:
            return self._interpreter(self._choice, self._choice.load(self._library), threads)
        except DelegateError as exc:
            raise BackendUnavailableError(
                f"LiteRT could not open another {self._choice.name} interpreter for async runs: {exc}"
            ) from exc

    def _describe(self, interpreter: Any, failures: list[str]) -> RunsOn:
        precision, weights = _precisions(interpreter, self._choice.name)
        details = {
            "library": self._library.label,
            "delegate": self._choice.name,
            "threads": str(self._threads),
            "weights": weights,
        }
        if self._choice.library is not None:
            details["delegate_library"] = self._choice.library
        if failures:
            details["fallback"] = "; ".join(failures)
        device, device_name = self._choice.device()
        return RunsOn(self.key, device, device_name, precision, details)


def _describe_choice(choice: DelegateChoice) -> str:
    if choice.name == "none":
        return "the built-in kernels (delegate none)"
    return f"delegate {choice.name}" + (f" ({choice.library})" if choice.library else "")


def _one_line(exc: BaseException) -> str:
    """LiteRT's error lines, which it runs together ("...not broadcastable.Node number 0 (ADD)..."), as sentences."""
    text = re.sub(r"(?<=[^\s.])\.?(?=Node number \d)", ". ", str(exc))
    return " ".join(text.split())


def _specs(details: list[dict[str, Any]], free_batch: bool = False) -> list[TensorSpec]:
    return [TensorSpec(d["name"], _shape(d, free_batch), np.dtype(d["dtype"]).name, _quantization(d)) for d in details]


def _shape(detail: dict[str, Any], free_batch: bool = False) -> tuple[int | None, ...]:
    dims = [None if int(n) < 0 else int(n) for n in detail.get("shape_signature", detail["shape"])]
    if free_batch and dims:
        dims[0] = None
    return tuple(dims)


def _quantization(detail: dict[str, Any]) -> Quantization | None:
    """Per-tensor quantization; None when unquantized or per-channel (which model inputs never are)."""
    params = detail.get("quantization_parameters")
    if params is None:
        scale, zero_point = detail.get("quantization", (0.0, 0))
        return Quantization(float(scale), int(zero_point)) if scale else None
    if len(params["scales"]) != 1:
        return None
    return Quantization(float(params["scales"][0]), int(params["zero_points"][0]))


def _is_quantized(detail: dict[str, Any]) -> bool:
    params = detail.get("quantization_parameters")
    return bool(len(params["scales"])) if params is not None else bool(detail.get("quantization", (0.0,))[0])


def _precisions(interpreter: Any, delegate: str) -> tuple[str, str]:
    """(precision inference runs at, precision the weights are stored in).

    float16 weights are dequantized to float32 when the model is prepared, so they still run at fp32.
    """
    try:
        tensors = interpreter.get_tensor_details()
    except ValueError:
        tensors = interpreter.get_input_details() + interpreter.get_output_details()
    dtypes = {np.dtype(t["dtype"]).name for t in tensors}
    quantized = any(np.dtype(t["dtype"]).name in ("int8", "uint8") and _is_quantized(t) for t in tensors)
    weights = "int8" if quantized else "fp16" if "float16" in dtypes else "fp32"
    return ("int8" if quantized or delegate == "edgetpu" else "fp32"), weights
