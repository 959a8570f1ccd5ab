"""ONNX Runtime backend: one `.onnx` file on TensorRT, CUDA, OpenVINO or the CPU.

A device asks for an execution-provider chain (TensorRT falls back to CUDA for the nodes it cannot
build, everything falls back to the CPU). ONNX Runtime silently drops a provider whose libraries do
not load, so after loading we read which providers are really active and report that, never the one
asked for. ONNX Runtime's own Python-level retry is turned off: it prints to stdout and swaps
providers behind our back.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import mmap
import os
import platform
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from edge_runtime.backends.base import (
    AsyncRunner,
    Backend,
    BackendOptions,
    BackendStatus,
    Callback,
    ModelSource,
    Outputs,
    RunsOn,
    TensorSpec,
    ThreadedAsyncRunner,
)
from edge_runtime.errors import BackendUnavailableError, ConfigError, ModelLoadError, ModelMismatchError
from edge_runtime.package.manifest import ModelFormat, Precision

log = logging.getLogger(__name__)

CPU, CUDA, TENSORRT, OPENVINO = (
    "CPUExecutionProvider",
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
    "OpenVINOExecutionProvider",
)
PROVIDER_PACKAGES = {CUDA: "onnxruntime-gpu", TENSORRT: "onnxruntime-gpu", OPENVINO: "onnxruntime-openvino"}
DEVICE_KINDS = {CPU: "CPU", CUDA: "CUDA", TENSORRT: "TENSORRT", OPENVINO: "OPENVINO"}
GPU_PROVIDERS = frozenset({CUDA, TENSORRT})
# Op types that only appear in quantized graphs (QDQ, QOperator and integer-matmul forms).
QUANTIZED_MARKERS = ("QuantizeLinear", "QLinear", "MatMulInteger", "ConvInteger", "QGemm")
PRECISION_RANK = {"int8": 0, "fp16": 1, "bf16": 1, "fp32": 2}
ORT_DTYPES = {"float": "float32", "double": "float64", "bool": "bool"}
_DEVICE_PATTERN = re.compile(r"^(CPU|CUDA(:\d+)?|TENSORRT(:\d+)?|OPENVINO:\S+)$", re.IGNORECASE)

ProviderEntry = tuple[str, dict[str, Any]]


class OnnxRuntimeOptions(BackendOptions):
    device: str = Field(
        default="CPU",
        description='"CPU", "CUDA[:N]", "TENSORRT[:N]" or "OPENVINO:<OpenVINO device>", e.g. "OPENVINO:GPU.0".',
    )
    providers: tuple[str, ...] | None = Field(
        default=None, description="Exact provider chain, overriding the one derived from `device`."
    )
    device_id: int | None = Field(default=None, ge=0, description="GPU ordinal; same as the N in CUDA:N.")
    fp16: bool = Field(default=False, description="Let TensorRT build fp16 kernels (as precision: fp16 does).")
    engine_cache_dir: Path | None = Field(
        default=None, description="TensorRT engines and timing cache; default <cache_dir>/tensorrt."
    )
    gpu_mem_limit: int | None = Field(default=None, ge=1, description="CUDA arena limit in bytes.")
    cudnn_conv_algo_search: Literal["EXHAUSTIVE", "HEURISTIC", "DEFAULT"] | None = None
    io_binding: bool | None = Field(default=None, description="None: on when CUDA or TensorRT is active.")
    inter_op_threads: int | None = Field(
        default=None, ge=1, description="Above 1, independent graph branches run in parallel."
    )
    graph_optimization_level: Literal["disabled", "basic", "extended", "all"] = "all"

    @field_validator("device")
    @classmethod
    def _known_device(cls, device: str) -> str:
        if not _DEVICE_PATTERN.match(device):
            raise ValueError(
                f"unknown device {device!r}; expected CPU, CUDA, CUDA:N, TENSORRT, TENSORRT:N or "
                "OPENVINO:<device> (e.g. OPENVINO:CPU, OPENVINO:GPU.0, OPENVINO:NPU)"
            )
        kind, _, rest = device.partition(":")
        return kind.upper() + (f":{rest}" if rest else "")

    @field_validator("providers")
    @classmethod
    def _provider_names(cls, providers: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if providers is not None and (not providers or not all(p.endswith("ExecutionProvider") for p in providers)):
            raise ValueError(f"expected ONNX Runtime provider names such as {CUDA}, got {list(providers)}")
        return providers

    @model_validator(mode="after")
    def _consistent(self) -> OnnxRuntimeOptions:
        kind, _, rest = self.device.partition(":")
        if kind in ("CUDA", "TENSORRT") and rest and self.device_id not in (None, int(rest)):
            raise ValueError(f"device {self.device} contradicts device_id {self.device_id}")
        if self.fp16 and self.precision not in (None, Precision.FP16):
            raise ValueError(f"fp16 contradicts precision {self.precision.value if self.precision else None}")
        if self.fp16 and TENSORRT not in self.provider_names():
            raise ValueError("fp16 only applies to TensorRT; use device TENSORRT or an fp16 model variant")
        return self

    def provider_names(self) -> tuple[str, ...]:
        """The provider chain in priority order, CPU last as the catch-all for unsupported nodes."""
        if self.providers is not None:
            return self.providers
        kind = self.device.partition(":")[0]
        chains = {"CPU": (CPU,), "CUDA": (CUDA, CPU), "TENSORRT": (TENSORRT, CUDA, CPU), "OPENVINO": (OPENVINO, CPU)}
        return chains[kind]

    def gpu_ordinal(self) -> int:
        kind, _, rest = self.device.partition(":")
        if kind in ("CUDA", "TENSORRT") and rest:
            return int(rest)
        return self.device_id or 0

    def openvino_device(self) -> str | None:
        kind, _, rest = self.device.partition(":")
        return rest if kind == "OPENVINO" else None

    def trt_fp16(self) -> bool:
        return self.fp16 or self.precision == Precision.FP16


def default_engine_cache_dir(cache_dir: Path | None) -> Path:
    """Engines take minutes to build, so they live somewhere that survives a reboot, never in /tmp."""
    if cache_dir is not None:
        return cache_dir / "tensorrt"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "edge-runtime" / "tensorrt"


def engine_cache_dir(options: OnnxRuntimeOptions) -> Path:
    return options.engine_cache_dir or default_engine_cache_dir(options.cache_dir)


def build_providers(options: OnnxRuntimeOptions, *, quantized: bool) -> list[ProviderEntry]:
    """The provider chain with each provider's options, as `InferenceSession(providers=...)` takes it.

    TensorRT's int8 flag is set for quantized (QDQ) graphs only: it takes its scales from the Q/DQ
    nodes, whereas on a float graph it would need a calibration table we do not have.
    """
    device_id = options.gpu_ordinal()
    entries: list[ProviderEntry] = []
    for name in options.provider_names():
        settings: dict[str, Any] = {}
        if name == TENSORRT:
            cache = str(engine_cache_dir(options))
            settings = {
                "device_id": device_id,
                "trt_fp16_enable": options.trt_fp16(),
                "trt_int8_enable": quantized,
                "trt_engine_cache_enable": True,
                "trt_engine_cache_path": cache,
                "trt_timing_cache_enable": True,
                "trt_timing_cache_path": cache,
            }
        elif name == CUDA:
            settings = {"device_id": device_id}
            if options.gpu_mem_limit is not None:
                settings["gpu_mem_limit"] = options.gpu_mem_limit
            if options.cudnn_conv_algo_search is not None:
                settings["cudnn_conv_algo_search"] = options.cudnn_conv_algo_search
        elif name == OPENVINO and options.openvino_device() is not None:
            settings = {"device_type": options.openvino_device()}
        entries.append((name, settings))
    return entries


def missing_providers(wanted: Sequence[str], available: Sequence[str], version: str) -> str | None:
    """Why the chain cannot be built from this onnxruntime package, or None when it can."""
    missing = [name for name in wanted if name not in available]
    if not missing:
        return None
    packages = sorted({PROVIDER_PACKAGES.get(name, "an onnxruntime build with it") for name in missing})
    return (
        f"onnxruntime {version} has no {', '.join(missing)} (available: {', '.join(available)}); "
        f"install {' or '.join(packages)} in place of the plain onnxruntime package"
    )


@dataclass(frozen=True)
class ModelFacts:
    quantized: bool
    float16: bool


def inspect_model(path: Path) -> ModelFacts:
    """Read what precision a model file computes at, with the `onnx` package when it is installed."""
    try:
        import onnx
    except ImportError:
        return scan_model_bytes(path)
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception:
        return scan_model_bytes(path)
    quantized = any(marker in node.op_type for node in graph.node for marker in QUANTIZED_MARKERS)
    float16 = any(t.data_type == onnx.TensorProto.FLOAT16 for t in graph.initializer) or any(
        v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for v in graph.input
    )
    return ModelFacts(quantized=quantized, float16=float16)


def scan_model_bytes(path: Path) -> ModelFacts:
    """Without `onnx`: op types are plain strings in the protobuf, so a byte search finds them.

    fp16 weights cannot be seen this way; the caller adds fp16 inputs/outputs from the session.
    """
    try:
        with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            quantized = any(data.find(marker.encode()) >= 0 for marker in QUANTIZED_MARKERS)
    except (OSError, ValueError):
        quantized = False
    return ModelFacts(quantized=quantized, float16=False)


def effective_precision(facts: ModelFacts, active: str, trt_fp16: bool, openvino_device: str | None) -> str:
    """The precision inference really runs at, given the provider that actually took the graph."""
    if facts.quantized:
        return "int8"
    if facts.float16:
        return "fp16"
    if active == TENSORRT and trt_fp16:
        return "fp16"
    if active == OPENVINO and (openvino_device or "").split(".")[0] in ("GPU", "NPU"):
        return "fp16"  # OpenVINO's default inference precision on those devices
    return "fp32"


def describe_runs_on(
    options: OnnxRuntimeOptions,
    chain: Sequence[str],
    active: Sequence[str],
    precision: str,
    threads: int,
    io_binding: bool,
) -> RunsOn:
    """What the session really runs on; a provider ONNX Runtime dropped is named, never claimed."""
    requested, provider = chain[0], active[0]
    device = _device_label(provider, options)
    name = _gpu_name(options.gpu_ordinal()) if provider in GPU_PROVIDERS else cpu_name()
    if provider == OPENVINO:
        name = f"OpenVINO {options.openvino_device() or 'default device'} ({name})"
    details = {"providers": ",".join(active), "threads": str(threads), "io_binding": "on" if io_binding else "off"}
    if TENSORRT in chain:
        details["engine_cache_dir"] = str(engine_cache_dir(options))
    if provider != requested:
        details["fallback"] = f"{requested} did not start; running on {provider}"
        name = f"{name} (fallback: {options.device} requested, {requested} not active)"
    return RunsOn(backend="onnxruntime", device=device, device_name=name, precision=precision, details=details)


def check_precision(wanted: Precision | None, precision: str, where: str) -> None:
    """Refuse to run lower than asked (accuracy would drop unnoticed); running higher only warns."""
    if wanted is None or wanted.value == precision:
        return
    if PRECISION_RANK[precision] < PRECISION_RANK[wanted.value]:
        raise BackendUnavailableError(
            f"{where} runs at {precision}, lower than the {wanted.value} asked for; use a {wanted.value} variant"
        )
    log.warning("%s runs at %s, not the %s asked for", where, precision, wanted.value)


class OnnxRuntimeBackend(Backend):
    key: ClassVar[str] = "onnxruntime"
    formats: ClassVar[frozenset[ModelFormat]] = frozenset({ModelFormat.ONNX})
    options_type: ClassVar[type[BackendOptions]] = OnnxRuntimeOptions

    @classmethod
    def probe(cls) -> BackendStatus:
        try:
            import onnxruntime as ort

            providers = list(ort.get_available_providers())
            devices = tuple(kind for provider, kind in DEVICE_KINDS.items() if provider in providers)
            names = {"CPU": cpu_name()}
            gpus = ", ".join(nvidia_device_names())
            names.update({kind: gpus for kind in ("CUDA", "TENSORRT") if gpus and kind in devices})
            return BackendStatus(cls.key, True, ort.__version__, devices, names)
        except Exception as error:
            return BackendStatus(cls.key, False, reason=f"cannot use onnxruntime: {error}")

    def __init__(self, source: ModelSource, options: BackendOptions) -> None:
        import onnxruntime as ort

        if not isinstance(options, OnnxRuntimeOptions):
            options = OnnxRuntimeOptions.model_validate(options.model_dump(exclude_unset=True))
        self._options = opts = options
        chain = opts.provider_names()
        reason = missing_providers(chain, ort.get_available_providers(), ort.__version__)
        if reason:
            raise BackendUnavailableError(f"device {opts.device} for {source.path}: {reason}")
        if not source.path.is_file():
            raise ModelLoadError(f"cannot load {source.path}: no such file")
        facts = inspect_model(source.path)
        self._threads = opts.threads or _usable_cores()
        self._session = self._create_session(ort, source.path, build_providers(opts, quantized=facts.quantized))
        self._invalid_argument: type[Exception] = ort.capi.onnxruntime_pybind11_state.InvalidArgument
        self.inputs = [_tensor_spec(arg) for arg in self._session.get_inputs()]
        self.outputs = [_tensor_spec(arg) for arg in self._session.get_outputs()]
        self._input_names = [t.name for t in self.inputs]
        self._output_names = [t.name for t in self.outputs]
        if any(t.dtype == "float16" for t in self.inputs + self.outputs):
            facts = ModelFacts(facts.quantized, float16=True)
        active = list(self._session.get_providers())
        precision = effective_precision(facts, active[0], opts.trt_fp16(), opts.openvino_device())
        check_precision(opts.precision, precision, f"{source.path} on onnxruntime {opts.device}")
        self._io_binding = opts.io_binding if opts.io_binding is not None else active[0] in GPU_PROVIDERS
        self._output_device = ("cuda", opts.gpu_ordinal()) if active[0] in GPU_PROVIDERS else ("cpu", 0)
        self.runs_on = describe_runs_on(opts, chain, active, precision, self._threads, self._io_binding)
        if "fallback" in self.runs_on.details:
            log.warning("onnxruntime: %s for %s", self.runs_on.device_name, source.path)
        self._run = self._make_run()

    def _create_session(self, ort: Any, path: Path, providers: list[ProviderEntry]) -> Any:
        opts = self._options
        levels = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED"}
        session_options = ort.SessionOptions()
        session_options.intra_op_num_threads = self._threads
        level = levels.get(opts.graph_optimization_level, "ORT_ENABLE_ALL")
        session_options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        session_options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if opts.inter_op_threads is not None and opts.inter_op_threads > 1:
            session_options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
            session_options.inter_op_num_threads = opts.inter_op_threads
        if TENSORRT in opts.provider_names():
            _prepare_engine_cache(engine_cache_dir(opts))
        try:
            return ort.InferenceSession(str(path), sess_options=session_options, providers=providers, enable_fallback=0)
        except Exception as error:
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            chain = ", ".join(name for name, _ in providers)
            raise ModelLoadError(f"onnxruntime cannot load {path} ({chain}): {first_line}") from None

    def _make_run(self) -> Callable[[Sequence[np.ndarray]], Outputs]:
        """A run function with its own IO binding, since a binding must not be shared between threads."""
        session, input_names, output_names = self._session, self._input_names, self._output_names
        if not self._io_binding:
            return lambda inputs: session.run(output_names, dict(zip(input_names, inputs, strict=False)))
        binding = session.io_binding()
        device, device_id = self._output_device

        def run_bound(inputs: Sequence[np.ndarray]) -> Outputs:
            for spec, array in zip(self.inputs, inputs, strict=False):
                if not _fits(spec, array):  # a bound run reports mismatches only as a generic RuntimeError
                    got = f"{spec.name} {list(np.shape(array))} {getattr(array, 'dtype', type(array).__name__)}"
                    raise ModelMismatchError(f"{self._expects()}; got {got}")
                binding.bind_cpu_input(spec.name, np.ascontiguousarray(array))
            binding.clear_binding_outputs()
            for name in output_names:
                binding.bind_output(name, device, device_id)
            session.run_with_iobinding(binding)
            outputs: Outputs = binding.copy_outputs_to_cpu()
            return outputs

        return run_bound

    def _guarded(self, run: Callable[[Sequence[np.ndarray]], Outputs], inputs: Sequence[np.ndarray]) -> Outputs:
        if len(inputs) != len(self._input_names):
            raise ModelMismatchError(f"{self._expects()}; got {len(inputs)} inputs")
        try:
            return run(inputs)
        except self._invalid_argument as error:
            first_line = (str(error).strip().splitlines() or [""])[0]
            raise ModelMismatchError(f"{self._expects()}; onnxruntime rejected the inputs: {first_line}") from None

    def _expects(self) -> str:
        return "the model expects " + ", ".join(f"{t.name} {list(t.shape)} {t.dtype}" for t in self.inputs)

    def infer(self, inputs: Sequence[np.ndarray]) -> Outputs:
        return self._guarded(self._run, inputs)

    def async_runner(self, callback: Callback, max_in_flight: int | None = None) -> AsyncRunner:
        """Workers share one session; ONNX Runtime runs concurrent calls and releases the GIL.

        Intra-op threads are not divided among workers: the thread pool belongs to the session and
        concurrent runs share it, so dividing would mean one session (and one copy of the weights)
        per worker. On a GPU the workers overlap host-device copies with compute instead.
        """
        count = max_in_flight or self._options.max_in_flight or 2
        runs = [functools.partial(self._guarded, self._make_run()) for _ in range(count)]
        return ThreadedAsyncRunner(runs, callback)

    def close(self) -> None:
        self._session = None
        self._run = _closed


def _closed(inputs: Sequence[np.ndarray]) -> Outputs:
    raise RuntimeError("the onnxruntime backend was closed")


def _fits(spec: TensorSpec, array: np.ndarray) -> bool:
    dims_fit = all(e is None or e == d for e, d in zip(spec.shape, np.shape(array), strict=False))
    return getattr(array, "dtype", None) == spec.dtype and np.ndim(array) == len(spec.shape) and dims_fit


def _tensor_spec(arg: Any) -> TensorSpec:
    shape = tuple(d if isinstance(d, int) and d >= 0 else None for d in arg.shape)
    element = str(arg.type).removeprefix("tensor(").removesuffix(")")
    return TensorSpec(name=arg.name, shape=shape, dtype=ORT_DTYPES.get(element, element))


def _device_label(provider: str, options: OnnxRuntimeOptions) -> str:
    if provider in GPU_PROVIDERS:
        return f"{DEVICE_KINDS[provider]}:{options.gpu_ordinal()}"
    if provider == OPENVINO:
        return f"OPENVINO:{options.openvino_device() or 'default'}"
    return DEVICE_KINDS.get(provider, provider)


def _prepare_engine_cache(path: Path) -> None:
    if path.resolve().is_relative_to(Path(tempfile.gettempdir()).resolve()):
        log.warning("TensorRT engine cache %s is in the temporary directory; engines rebuild after reboot", path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot create the TensorRT engine cache {path}: {error.strerror}") from None


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def _gpu_name(ordinal: int) -> str:
    names = nvidia_device_names()
    return names[ordinal] if ordinal < len(names) else f"NVIDIA GPU {ordinal}"


def nvidia_device_names() -> list[str]:
    """Names of the GPUs the CUDA provider would use, in its device-id order; empty without one."""
    try:
        import onnxruntime as ort

        if CUDA not in ort.get_available_providers():
            return []
    except Exception:
        return []
    return cuda_driver_device_names()


def cuda_driver_device_names(library: str | None = None) -> list[str]:
    """Ask the CUDA driver (the library the CUDA provider itself runs on) for device names.

    The driver API numbers devices as CUDA does, honouring CUDA_VISIBLE_DEVICES, so the names line
    up with `device_id`; it is also present on Jetson boards, where NVML is not.
    """
    name = library or ("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
    try:
        driver = ctypes.CDLL(name)
        count = ctypes.c_int(0)
        if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return []
        names = []
        for ordinal in range(count.value):
            device, buffer = ctypes.c_int(0), ctypes.create_string_buffer(256)
            found = driver.cuDeviceGet(ctypes.byref(device), ordinal) == 0
            if found and driver.cuDeviceGetName(buffer, len(buffer), device) == 0:
                names.append(buffer.value.decode(errors="replace"))
        return names
    except (OSError, AttributeError):
        return []
