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
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

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
    options_as,
)
from edge_runtime.backends.host import available_cores, cpu_name
from edge_runtime.backends.onnxruntime.precision import (
    ModelFacts,
    check_precision,
    effective_precision,
    inspect_model,
)
from edge_runtime.backends.onnxruntime.providers import (
    CUDA,
    DEVICE_KINDS,
    GPU_PROVIDERS,
    OPENVINO,
    TENSORRT,
    OnnxRuntimeOptions,
    ProviderEntry,
    build_providers,
    default_engine_cache_dir,
    device_kind,
    engine_cache_dir,
    missing_providers,
    prepare_engine_cache,
    provider_problem,
)
from edge_runtime.errors import BackendUnavailableError, ModelLoadError, ModelMismatchError

if TYPE_CHECKING:
    from edge_runtime.hardware.facts import Hardware

__all__ = [
    "ORT_DTYPES",
    "OnnxRuntimeBackend",
    "OnnxRuntimeOptions",
    "build_providers",
    "cuda_driver_device_names",
    "default_engine_cache_dir",
    "describe_runs_on",
    "free_batch",
    "nvidia_device_names",
]

log = logging.getLogger(__name__)

ORT_DTYPES = {"float": "float32", "double": "float64", "bool": "bool"}


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


class OnnxRuntimeBackend(Backend):
    key: ClassVar[str] = "onnxruntime"
    options_type: ClassVar[type[BackendOptions]] = OnnxRuntimeOptions

    @classmethod
    def device_problem(
        cls, device: str, delegate: str | None, options: Mapping[str, Any], status: BackendStatus, hardware: Hardware
    ) -> str | None:
        return provider_problem(device, status.devices)

    @classmethod
    def device_name(
        cls, device: str, delegate: str | None, options: Mapping[str, Any], status: BackendStatus
    ) -> str | None:
        return status.device_names.get(device_kind(device))

    @classmethod
    def measurable_choices(cls, status: BackendStatus, hardware: Hardware) -> list[dict[str, Any]]:
        """TensorRT builds fp16 engines on request; the other providers run the variant's own precision."""
        return [
            {"device": device, "precision": precision}
            for device in status.devices
            for precision in ([None, "fp16"] if device.upper().startswith("TENSORRT") else [None])
        ]

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

        self._options = opts = options_as(OnnxRuntimeOptions, options)
        chain = opts.provider_names()
        reason = missing_providers(chain, ort.get_available_providers(), ort.__version__)
        if reason:
            raise BackendUnavailableError(f"device {opts.device} for {source.path}: {reason}")
        if not source.path.is_file():
            raise ModelLoadError(f"cannot load {source.path}: no such file")
        facts = inspect_model(source.path)
        self._threads = opts.threads or available_cores()
        graph = free_batch(source.path) if opts.dynamic_batch and TENSORRT not in chain else None
        if opts.dynamic_batch and TENSORRT in chain:
            log.info("onnxruntime: TensorRT builds its engines for the model's own shapes; %s keeps them", source.path)
        providers = build_providers(opts, quantized=facts.quantized)
        self._session = self._create_session(ort, source.path, providers, graph)
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

    def _create_session(self, ort: Any, path: Path, providers: list[ProviderEntry], graph: bytes | None) -> Any:
        """A session on `path`, or on `graph` (the same model with its batch freed) where given."""
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
            prepare_engine_cache(engine_cache_dir(opts))
        try:
            source = graph if graph is not None else str(path)
            return ort.InferenceSession(source, sess_options=session_options, providers=providers, enable_fallback=0)
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


def free_batch(path: Path) -> bytes | None:
    """The model at `path` with the first dimension of every input and output named `batch` instead of fixed.

    ONNX Runtime takes any size for a named dimension, so a model exported with a batch of 1 can run
    batches. Whether the graph really keeps the batch apart (a Reshape to a constant [1, -1] does not)
    shows only when a batch runs; the caller checks that. Shapes inferred for intermediate values are
    dropped, since they would still say 1. None where the model already names its batch dimensions.
    """
    import onnx

    try:
        model = onnx.load(str(path))
    except Exception as error:
        raise ModelLoadError(f"cannot read {path} to free its batch dimension: {error}") from None
    constants = {initializer.name for initializer in model.graph.initializer}
    changed = False
    for value in [*model.graph.input, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if value.name in constants or not dims or dims[0].HasField("dim_param"):
            continue
        dims[0].ClearField("dim_value")
        dims[0].dim_param = "batch"
        changed = True
    if not changed:
        return None
    del model.graph.value_info[:]
    return bytes(model.SerializeToString())


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
