"""LiteRT (TensorFlow Lite) backend: the CPU through XNNPACK, a Coral Edge TPU, or a GPU/external delegate.

A model runs with one delegate. The delegate named in the options is tried first, then each fallback:
an accelerator's library can be missing on a box that still runs the model well on the CPU, so a
failure is logged and kept in `runs_on.details["fallback"]` rather than stopping the daemon. Models
compiled for the Edge TPU (`*_edgetpu.tflite`) are the exception: the CPU cannot run them correctly,
so they are refused instead.

The interpreter comes from `ai_edge_litert`, else `tflite_runtime`, else `tensorflow`, imported on
first use so that importing this module needs none of them.
"""

from __future__ import annotations

import base64
import ctypes
import functools
import importlib
import logging
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

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
)
from edge_runtime.errors import BackendUnavailableError, ModelLoadError, ModelMismatchError
from edge_runtime.package.manifest import ModelFormat

log = logging.getLogger(__name__)

DelegateName = Literal["xnnpack", "edgetpu", "gpu", "external", "none"]
INTERPRETER_MODULES = (
    "ai_edge_litert.interpreter",
    "tflite_runtime.interpreter",
    "tensorflow.lite.python.interpreter",
)
EDGETPU_LIBRARIES = {"Linux": "libedgetpu.so.1", "Darwin": "libedgetpu.1.dylib", "Windows": "edgetpu.dll"}
GPU_DELEGATE_LIBRARY = "libtensorflowlite_gpu_delegate.so"
# A USB Coral boots as 1a6e:089a, takes its firmware from libedgetpu and comes back as 18d1:9302;
# opening it during that switch fails once.
EDGETPU_RETRY_PAUSE_S = 2.0
_CORAL_USB_IDS = {("1a6e", "089a"), ("18d1", "9302")}
_CPU_FALLBACK: list[DelegateName] = ["xnnpack"]
_PLUGIN_SYMBOLS = ("tflite_plugin_create_delegate", "tflite_plugin_destroy_delegate")
# A valid model holding one float tensor. A compiled interpreter wrapper first calls NumPy's C API
# when it creates an interpreter, not when it is imported, so building this one proves it works.
_PROBE_MODEL = base64.b64decode(
    "CAAAAFRGTDPC////FAAAACAAAAAoAAAApAAAAAMAAAABAAAACAAAAAQABAAEAAAABQAAAHNtb2tlAAAAAQAAABQAAAAAAA4A"
    "GAAUABAADAAIAAQADgAAABQAAAAcAAAAHAAAACAAAAAkAAAABAAAAG1haW4AAAAAAAAAAAEAAAAAAAAAAQAAAAAAAAABAAAA"
    "EAAAAAwADAAIAAAAAAAEAAwAAAAIAAAADAAAAAEAAAB4AAAAAQAAAAEAAAAAAAAA"
)
_NUMPY1_SIGNS = ("_ARRAY_API", "numpy.core.multiarray failed to import", "compiled using NumPy 1.x")
_MODEL_FILE_SIGNS = ("not a valid Flatbuffer", "Could not open", "allocation is null")


class LiteRtOptions(BackendOptions):
    """LiteRT picks its accelerator by delegate, so `device` is not used; `delegate` says where to run.

    A .tflite file runs at the precision it was converted to, so `precision` cannot lower it.
    """

    delegate: DelegateName = Field("xnnpack", description="xnnpack: CPU (LiteRT's default); none: plain CPU kernels.")
    fallback: list[DelegateName] = Field(
        default_factory=lambda: _CPU_FALLBACK.copy(),
        description="Delegates tried in order when the chosen one fails to load; [] makes that an error.",
    )
    edgetpu_device: str = Field(
        ":0",
        pattern=r"^(?:(?:usb|pci)(?::\d+)?|:\d+)$",
        description="usb, usb:N, pci, pci:N, or :N (N-th of any kind).",
    )
    delegate_library: str | None = Field(
        None,
        description=f"A TFLite delegate plugin for gpu/external; gpu defaults to {GPU_DELEGATE_LIBRARY}",
    )
    delegate_options: dict[str, str] = Field(default_factory=dict, description="Options for the gpu/external plugin.")

    @model_validator(mode="after")
    def _external_needs_library(self) -> LiteRtOptions:
        if self.delegate_library is None and "external" in (self.delegate, *self.fallback):
            raise ValueError("delegate 'external' needs delegate_library, the path of its shared library")
        return self


@dataclass(frozen=True)
class InterpreterLibrary:
    """The interpreter package in use, and why each one before it in the search order was passed over."""

    name: str
    version: str
    module: Any
    passed_over: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    def create(self, delegate: Any | None, threads: int, default_delegates: bool = True, **model: Any) -> Any:
        """An interpreter; without default delegates LiteRT does not apply XNNPACK by itself."""
        kwargs: dict[str, Any] = {"num_threads": threads}
        if delegate is not None:
            kwargs["experimental_delegates"] = [delegate]
        resolver = getattr(self.module, "OpResolverType", None)
        if resolver is not None and not default_delegates:
            kwargs["experimental_op_resolver_type"] = resolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        return self.module.Interpreter(**model, **kwargs)


def import_interpreter(candidates: Sequence[str] = INTERPRETER_MODULES) -> InterpreterLibrary:
    """The first candidate module that imports and builds an interpreter.

    Importing is not proof enough: a tflite_runtime wheel built for NumPy 1.x imports beside NumPy 2
    and fails only when it creates an interpreter, so each candidate builds a tiny one.
    """
    passed_over: list[str] = []
    for module_name in candidates:
        top = module_name.partition(".")[0]
        try:
            module = importlib.import_module(module_name)
            version = str(getattr(sys.modules[top], "__version__", "unknown"))
            library = InterpreterLibrary(top, version, module)
            library.create(None, threads=1, default_delegates=False, model_content=_PROBE_MODEL)
        except Exception as exc:
            passed_over.append(_why_unusable(top, exc))
            continue
        return InterpreterLibrary(library.name, library.version, library.module, tuple(passed_over))
    raise BackendUnavailableError(
        f"no LiteRT interpreter is usable ({'; '.join(passed_over)}); install one: pip install ai-edge-litert"
    )


@functools.lru_cache(maxsize=1)
def interpreter_library() -> InterpreterLibrary:
    return import_interpreter()


def _why_unusable(top: str, exc: BaseException) -> str:
    chain: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    if any(sign in str(error) for error in chain for sign in _NUMPY1_SIGNS):
        return f"{top} was built for NumPy 1.x; install ai-edge-litert or numpy<2 (NumPy {np.__version__} is installed)"
    return f"{top}: {type(exc).__name__}: {exc}"


def available_cores() -> int:
    """Cores this process may run on: a container or taskset can allow fewer than the box has."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for key in ("model name", "Model", "Hardware"):  # x86, then Raspberry Pi and other Arm boards
        for line in lines:
            name, _, value = line.partition(":")
            if name.strip() == key and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "CPU"


def edgetpu_devices() -> list[str]:
    """Edge TPUs on this box, named as the edgetpu delegate's `device` option names them."""
    usb = 0
    for device in Path("/sys/bus/usb/devices").glob("*"):
        try:
            ids = ((device / "idVendor").read_text().strip(), (device / "idProduct").read_text().strip())
        except OSError:
            continue
        usb += ids in _CORAL_USB_IDS
    pci = len(list(Path("/dev").glob("apex_*")))
    return [f"usb:{i}" for i in range(usb)] + [f"pci:{i}" for i in range(pci)]


def edgetpu_library() -> str:
    return EDGETPU_LIBRARIES.get(platform.system(), EDGETPU_LIBRARIES["Linux"])


def _edgetpu_name(device: str) -> str:
    kind = {"usb": " (USB)", "pci": " (PCIe)"}.get(device.partition(":")[0], "")
    return f"Coral Edge TPU{kind}"


def _plugin_problem(library: str) -> str | None:
    """Why `library` is no delegate plugin, found before LiteRT's loader meets it half-made."""
    try:
        handle = ctypes.CDLL(library)
    except OSError as exc:
        return str(exc) if library in str(exc) else f"cannot load {library}: {exc}"
    missing = [symbol for symbol in _PLUGIN_SYMBOLS if not hasattr(handle, symbol)]
    if missing:
        return f"{library} is no TFLite delegate plugin (it lacks {', '.join(missing)})"
    return None


class _DelegateError(Exception):
    """A delegate could not be loaded or could not take the model; the next fallback may."""


@dataclass(frozen=True)
class _DelegateChoice:
    name: DelegateName
    library: str | None = None  # None for the CPU, whose kernels are built into the interpreter
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, name: DelegateName, options: LiteRtOptions) -> _DelegateChoice:
        if name == "edgetpu":
            return cls(name, edgetpu_library(), {"device": options.edgetpu_device})
        if name == "gpu":
            return cls(name, options.delegate_library or GPU_DELEGATE_LIBRARY, dict(options.delegate_options))
        if name == "external":
            return cls(name, options.delegate_library, dict(options.delegate_options))
        return cls(name)

    def load(self, library: InterpreterLibrary) -> Any:
        """The loaded delegate (None for the CPU); raises _DelegateError with the loader's error."""
        if self.library is None:
            return None
        problem = _plugin_problem(self.library)
        if problem is not None:
            if self.name == "edgetpu":
                problem += " (install the Edge TPU runtime, libedgetpu1-std)"
            raise _DelegateError(problem)
        retry = self.name == "edgetpu" and not self.options["device"].startswith("pci")
        while True:
            try:
                return library.module.load_delegate(self.library, self.options)
            except (ValueError, RuntimeError) as exc:
                if not retry:
                    raise _DelegateError(str(exc).replace("\n", " ").strip()) from exc
                retry = False
                log.info("Edge TPU did not open (%s); retrying once in %.0f s", exc, EDGETPU_RETRY_PAUSE_S)
                time.sleep(EDGETPU_RETRY_PAUSE_S)

    def device(self) -> tuple[str, str]:
        """(device, device_name) for RunsOn."""
        if self.name == "edgetpu":
            device = self.options["device"]
            return f"edgetpu:{device.lstrip(':')}", _edgetpu_name(device)
        if self.library is not None:
            return self.name, f"{self.name} delegate {Path(self.library).name}"
        return "cpu", cpu_name()


class _Session:
    """One interpreter with its tensor indices worked out once, so a call does no lookups."""

    def __init__(self, interpreter: Any, model_name: str) -> None:
        interpreter.allocate_tensors()
        self._model_name = model_name
        inputs = interpreter.get_input_details()
        self._interpreter = interpreter
        self._indices = [d["index"] for d in inputs]
        self._outputs = [d["index"] for d in interpreter.get_output_details()]
        self._dynamic = {
            position: tuple(int(n) for n in d["shape"])
            for position, d in enumerate(inputs)
            if -1 in d.get("shape_signature", ())
        }
        self._set, self._invoke, self._get = interpreter.set_tensor, interpreter.invoke, interpreter.get_tensor

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
                self._interpreter.resize_tensor_input(self._indices[position], wanted, strict=True)
                self._dynamic[position] = wanted
                changed = True
        if changed:
            self._interpreter.allocate_tensors()


class LiteRtBackend(Backend):
    key = "litert"
    formats = frozenset({ModelFormat.TFLITE})
    options_type = LiteRtOptions

    @classmethod
    def probe(cls) -> BackendStatus:
        try:
            library = interpreter_library()
            devices = {"cpu": cpu_name()}
            notes = [f"using {library.label}", *library.passed_over] if library.passed_over else []
            edgetpus = edgetpu_devices()
            problem = _plugin_problem(edgetpu_library()) if edgetpus else None
            if problem is not None:
                notes.append(f"Edge TPU found but {problem}")
            elif edgetpus:
                devices.update({f"edgetpu:{d}": _edgetpu_name(d) for d in edgetpus})
            return BackendStatus(cls.key, True, library.version, tuple(devices), devices, "; ".join(notes))
        except Exception as exc:
            return BackendStatus(cls.key, False, reason=str(exc))

    def __init__(self, source: ModelSource, options: BackendOptions) -> None:
        self._source = source
        self._options = (
            options
            if isinstance(options, LiteRtOptions)
            else LiteRtOptions.model_validate(options.model_dump(exclude_unset=True))
        )
        self._threads = self._options.threads or available_cores()
        self._library = interpreter_library()
        if not source.path.is_file():
            raise ModelLoadError(f"LiteRT model file {source.path} does not exist")
        interpreter, self._choice, failures = self._open()
        try:
            self._session = _Session(interpreter, source.path.name)
        except (ValueError, RuntimeError) as exc:
            raise ModelLoadError(f"LiteRT cannot prepare {source.path}: {exc}") from exc
        self.inputs = _specs(interpreter.get_input_details())
        self.outputs = _specs(interpreter.get_output_details())
        self.runs_on = self._describe(interpreter, failures)

    def infer(self, inputs: Sequence[np.ndarray]) -> Outputs:
        return self._session.run(inputs)

    def async_runner(self, callback: Callback, max_in_flight: int | None = None) -> AsyncRunner:
        """N private interpreters (an interpreter is not thread-safe), sharing the threads between them."""
        count = max_in_flight or self._options.max_in_flight or 2
        threads = max(1, self._threads // count)
        sessions = [_Session(self._spawn(threads), self._source.path.name) for _ in range(count)]
        return ThreadedAsyncRunner([session.run for session in sessions], callback)

    def close(self) -> None:
        self.__dict__.pop("_session", None)  # frees the interpreter, then its delegate and device

    def _open(self) -> tuple[Any, _DelegateChoice, list[str]]:
        """The first delegate in the fallback order that loads and takes the model."""
        edgetpu_only = self._source.target == "edgetpu" or self._source.path.stem.endswith("_edgetpu")
        name = self._source.path.name
        if edgetpu_only and self._options.delegate != "edgetpu":
            raise BackendUnavailableError(
                f"{name} is compiled for the Edge TPU and runs only with delegate 'edgetpu', "
                f"not {self._options.delegate!r}; use a CPU variant of the model"
            )
        order: list[DelegateName] = ["edgetpu"] if edgetpu_only else [self._options.delegate, *self._options.fallback]
        failures: list[str] = []
        for delegate in dict.fromkeys(order):
            choice = _DelegateChoice.of(delegate, self._options)
            try:
                return self._interpreter(choice, choice.load(self._library), self._threads), choice, failures
            except _DelegateError as exc:
                failures.append(f"delegate {delegate} ({choice.library}) failed: {exc}")
                log.warning("LiteRT %s: %s", name, failures[-1])
        refusal = "; Edge TPU models never run on the CPU" if edgetpu_only else ""
        raise BackendUnavailableError(f"LiteRT cannot run {name}: {'; '.join(failures)}{refusal}")

    def _interpreter(self, choice: _DelegateChoice, delegate: Any, threads: int) -> Any:
        path = self._source.path
        try:
            return self._library.create(delegate, threads, choice.name != "none", model_path=str(path))
        except Exception as exc:
            if delegate is None or any(sign in str(exc) for sign in _MODEL_FILE_SIGNS):
                raise ModelLoadError(f"LiteRT cannot load {path}: {exc}") from exc
            raise _DelegateError(f"it could not take the model: {exc}") from exc

    def _spawn(self, threads: int) -> Any:
        try:
            return self._interpreter(self._choice, self._choice.load(self._library), threads)
        except _DelegateError as exc:
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


def _specs(details: list[dict[str, Any]]) -> list[TensorSpec]:
    return [TensorSpec(d["name"], _shape(d), np.dtype(d["dtype"]).name, _quantization(d)) for d in details]


def _shape(detail: dict[str, Any]) -> tuple[int | None, ...]:
    dims = detail.get("shape_signature", detail["shape"])
    return tuple(None if int(n) < 0 else int(n) for n in dims)


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
