"""OpenVINO backend: OpenVINO IR, ONNX and TFLite models on CPU, GPU, NPU or AUTO.

Precision is always set explicitly. Left alone, the CPU plugin runs fp32 models in bf16 on CPUs that
have it (and silently maps an f16 request to bf16), which moves a detector's outputs far enough to
change its detections. So every compile states INFERENCE_PRECISION_HINT, checked against the
device's OPTIMIZATION_CAPABILITIES, and `runs_on.precision` is what the compiled model reports back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import Field

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
    options_as,
)
from edge_runtime.backends.openvino.devices import (
    FROM_HINT_TYPE,
    HINT_TYPE,
    VIRTUAL_DEVICES,
    check_capable,
    device_capabilities,
    device_family,
    device_problem,
    display_name,
    first_line,
    float_precision_for,
    offered_precisions,
    openvino_core,
    require_core,
    resolve_device,
)
from edge_runtime.backends.openvino.preprocessing import EmbeddedPreprocessing, fold_preprocessing
from edge_runtime.backends.openvino.runner import OpenVinoAsyncRunner, shareable
from edge_runtime.errors import ConfigError, ModelLoadError, ModelMismatchError
from edge_runtime.package.manifest import Precision

if TYPE_CHECKING:
    from edge_runtime.hardware.facts import Hardware

__all__ = [
    "EmbeddedPreprocessing",
    "OpenVinoAsyncRunner",
    "OpenVinoBackend",
    "OpenVinoOptions",
    "compile_config",
    "device_capabilities",
    "make_static",
    "runs_quantized",
    "tensor_specs",
]

log = logging.getLogger(__name__)

_RESERVED_PROPERTIES = {
    "INFERENCE_PRECISION_HINT": "precision",
    "CACHE_DIR": "cache_dir",
    "PERFORMANCE_HINT": "hint",
    "INFERENCE_NUM_THREADS": "threads",
}


class OpenVinoOptions(BackendOptions):
    num_requests: int | None = Field(
        default=None, ge=1, description="Requests the plugin plans streams for (PERFORMANCE_HINT_NUM_REQUESTS)."
    )
    enable_cpu_pinning: bool | None = Field(
        default=None, description="Pin inference threads; turn off when other busy processes share the CPU."
    )
    compile_cache: bool = Field(default=True, description="Keep compiled blobs in cache_dir when it is set.")
    static_shape: tuple[int, ...] | None = Field(
        default=None, description="Reshape the only input to this static shape (NPU needs static shapes)."
    )

    embedded_preprocessing: EmbeddedPreprocessing | None = None
    extra_properties: dict[str, str] = Field(default_factory=dict)


def _device_properties(core: Any, device: str, precision: Precision, options: OpenVinoOptions) -> dict[str, Any]:
    """Per-device settings, keeping only those the device's plugin understands (NPU has no thread count)."""
    check_capable(device, precision, tuple(core.get_property(device, "OPTIMIZATION_CAPABILITIES")))
    supported = core.get_property(device, "SUPPORTED_PROPERTIES")
    wanted = {
        "INFERENCE_PRECISION_HINT": HINT_TYPE.get(precision),
        "INFERENCE_NUM_THREADS": options.threads,
        "ENABLE_CPU_PINNING": options.enable_cpu_pinning,
    }
    return {key: value for key, value in wanted.items() if value is not None and key in supported}


def _cache_dir(options: OpenVinoOptions) -> Path | None:
    """Blobs are not portable across OpenVINO releases, so each release gets its own folder."""
    if options.cache_dir is None or not options.compile_cache:
        return None
    from openvino import get_version

    return options.cache_dir / f"openvino-{get_version().split('-')[0]}"


def compile_config(
    core: Any, candidates: Sequence[str], plan: dict[str, Precision], options: OpenVinoOptions, virtual: bool
) -> dict[str, Any]:
    """The properties handed to compile_model; virtual devices get per-device DEVICE_PROPERTIES."""
    for key in options.extra_properties:
        if key in _RESERVED_PROPERTIES:
            raise ConfigError(f"extra_properties must not set {key}; use the option {_RESERVED_PROPERTIES[key]}")
    config: dict[str, Any] = {"PERFORMANCE_HINT": options.hint.upper()}
    num_requests = options.num_requests or options.max_in_flight
    if num_requests is not None:
        config["PERFORMANCE_HINT_NUM_REQUESTS"] = str(num_requests)
    cache_dir = _cache_dir(options)
    if cache_dir is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        config["CACHE_DIR"] = str(cache_dir)
    per_device = {name: _device_properties(core, name, plan[name], options) for name in candidates}
    if virtual:
        config["DEVICE_PROPERTIES"] = per_device
    else:
        config.update(per_device[candidates[0]])
    config.update(options.extra_properties)
    return config


def _read_model(core: Any, path: Path) -> Any:
    try:
        return core.read_model(str(path))
    except Exception as error:
        raise ModelLoadError(f"OpenVINO cannot read model {path}: {first_line(error)}") from None


def make_static(model: Any, options: OpenVinoOptions, needs_static: bool, path: Path) -> None:
    """Reshape to `options.static_shape`, pin a dynamic batch to 1 for devices that need static shapes, or free
    the batch dimension for `options.dynamic_batch`."""
    from openvino import Dimension, PartialShape

    if options.dynamic_batch and needs_static:
        log.info("openvino: the device needs static shapes; %s keeps its own, so requests are not batched", path)
    if options.dynamic_batch and not needs_static:
        shapes = {}
        for port in model.inputs:
            partial = port.get_partial_shape()
            if partial.rank.is_dynamic or partial.rank.get_length() == 0:
                raise ConfigError(f"{path} input {partial} has no batch dimension to free")
            shapes[port] = PartialShape([Dimension(), *list(partial)[1:]])
    elif options.static_shape is not None:
        if len(model.inputs) != 1:
            raise ConfigError(f"static_shape needs a model with one input; {path} has {len(model.inputs)}")
        shapes = {model.inputs[0]: PartialShape(list(options.static_shape))}
    elif needs_static and model.is_dynamic():
        shapes = {}
        for port in model.inputs:
            dims = list(port.get_partial_shape())
            if port.get_partial_shape().rank.is_dynamic or any(d.is_dynamic for d in dims[1:]):
                raise ConfigError(
                    f"{path} input {port.get_partial_shape()} has dynamic dims besides the batch; "
                    "the device needs static shapes: set static_shape"
                )
            shapes[port] = PartialShape([1, *(d.get_length() for d in dims[1:])])
    else:
        return
    try:
        model.reshape(shapes)
    except Exception as error:
        raise ConfigError(f"cannot reshape {path} to {list(shapes.values())}: {first_line(error)}") from None


def tensor_specs(ports: Sequence[Any], kind: str) -> list[TensorSpec]:
    specs = []
    for index, port in enumerate(ports):
        names = port.get_names()
        name = port.get_any_name() if names else f"{kind}_{index}"
        partial = port.get_partial_shape()
        shape = () if partial.rank.is_dynamic else tuple(None if d.is_dynamic else d.get_length() for d in partial)
        specs.append(TensorSpec(name, shape, np.dtype(port.get_element_type().to_dtype()).name))
    return specs


def _type_name(value: Any) -> str:
    return str(value.get_type_name()) if hasattr(value, "get_type_name") else str(value)


def _compiled_properties(compiled: Any, execution_device: str, virtual: bool) -> dict[str, Any]:
    """Properties of the compiled model on the device it really runs on (AUTO nests them per device)."""
    if virtual:
        per_device = compiled.get_property("DEVICE_PROPERTIES")
        return dict(per_device.get(execution_device) or per_device.get(device_family(execution_device)) or {})
    supported = compiled.get_property("SUPPORTED_PROPERTIES")
    names = ("INFERENCE_PRECISION_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS", "ENABLE_CPU_PINNING")
    return {name: compiled.get_property(name) for name in names if name in supported}


_COMPUTE_LAYERS = frozenset({"Convolution", "FullyConnected", "MatMul", "GroupConvolution", "Deconvolution"})


def runs_quantized(compiled: Any) -> bool | None:
    """Whether any compute layer of the compiled graph executes in 8 bit; None if it cannot be read."""
    try:
        ops = compiled.get_runtime_model().get_ordered_ops()
        layers = [op.get_rt_info() for op in ops]
        return any(
            info["layerType"].astype(str) in _COMPUTE_LAYERS and info["runtimePrecision"].astype(str) in ("u8", "i8")
            for info in layers
            if "layerType" in info and "runtimePrecision" in info
        )
    except Exception:
        return None


class OpenVinoBackend(Backend):
    """A model compiled by OpenVINO; `infer` reuses one request, so call it from one thread at a time."""

    key: ClassVar[str] = "openvino"
    options_type: ClassVar[type[BackendOptions]] = OpenVinoOptions
    reads_hint: ClassVar[bool] = True

    @classmethod
    def device_problem(
        cls, device: str, delegate: str | None, options: Mapping[str, Any], status: BackendStatus, hardware: Hardware
    ) -> str | None:
        return device_problem(device, status.devices, hardware)

    @classmethod
    def device_name(
        cls, device: str, delegate: str | None, options: Mapping[str, Any], status: BackendStatus
    ) -> str | None:
        return display_name(device, status.device_names)

    @classmethod
    def measurable_choices(cls, status: BackendStatus, hardware: Hardware) -> list[dict[str, Any]]:
        return [
            {"device": device, "precision": precision}
            for device in status.devices
            for precision in offered_precisions(device, hardware)
        ]

    @classmethod
    def probe(cls) -> BackendStatus:
        try:
            from openvino import get_version

            core = openvino_core()
            devices = tuple(core.available_devices)
            names = {device: str(core.get_property(device, "FULL_DEVICE_NAME")) for device in devices}
            return BackendStatus(cls.key, True, get_version(), devices, names)
        except Exception as error:
            return BackendStatus(cls.key, False, reason=f"OpenVINO unusable: {first_line(error)}")

    def __init__(self, source: ModelSource, options: BackendOptions) -> None:
        opts = options_as(OpenVinoOptions, options)
        core = require_core()
        from openvino import Tensor

        self._options = opts
        self._virtual = device_family(opts.device) in VIRTUAL_DEVICES
        candidates = resolve_device(opts.device, tuple(core.available_devices))
        plan = {name: float_precision_for(source.precision, opts.precision, device_family(name)) for name in candidates}
        config = compile_config(core, candidates, plan, opts, self._virtual)
        model = _read_model(core, source.path)
        make_static(model, opts, any(device_family(name) == "NPU" for name in candidates), source.path)
        if opts.embedded_preprocessing is not None:
            model = fold_preprocessing(model, opts.embedded_preprocessing, source.path)
        try:
            self._compiled = core.compile_model(model, opts.device, config)
        except Exception as error:
            raise ModelLoadError(
                f"OpenVINO cannot compile {source.path} for {opts.device}: {first_line(error)}"
            ) from None
        self._request = self._compiled.create_infer_request()
        self.inputs = tensor_specs(self._compiled.inputs, "input")
        self.outputs = tensor_specs(self._compiled.outputs, "output")
        self._input_dtypes = [np.dtype(spec.dtype) for spec in self.inputs]
        self._tensor_type = Tensor
        self.runs_on = self._describe(core, source, plan, config.get("CACHE_DIR", ""))

    def _describe(self, core: Any, source: ModelSource, plan: dict[str, Precision], cache_dir: str) -> RunsOn:
        compiled = self._compiled
        executing = [name.strip("()") for name in compiled.get_property("EXECUTION_DEVICES")]
        device = executing[0] if executing else next(iter(plan))
        properties = _compiled_properties(compiled, device, self._virtual)
        planned = plan.get(device) or next(iter(plan.values()))
        hint_type = properties.get("INFERENCE_PRECISION_HINT")
        float_precision = planned if hint_type is None else FROM_HINT_TYPE.get(_type_name(hint_type), planned)
        details = {
            "hint": self._options.hint,
            "num_requests": str(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")),
            "threads": str(properties.get("INFERENCE_NUM_THREADS", "")),
            "streams": str(properties.get("NUM_STREAMS", "")),
            "cache_dir": cache_dir,
            "execution_devices": ",".join(executing),
            "loaded_from_cache": str(compiled.get_property("LOADED_FROM_CACHE")),
        }
        precision = float_precision.value
        quantized = runs_quantized(compiled)
        if quantized is None:  # no runtime graph to inspect: trust the variant and the device
            quantized = source.precision is Precision.INT8 and "INT8" in core.get_property(
                device, "OPTIMIZATION_CAPABILITIES"
            )
        if quantized:
            precision = Precision.INT8.value
            details["float_precision"] = float_precision.value
        elif source.precision is Precision.INT8:
            details["quantized_ops"] = f"run in {float_precision.value} on {device}"
        name = str(core.get_property(device, "FULL_DEVICE_NAME"))
        return RunsOn(self.key, self._options.device, name, precision, details)

    def infer(self, inputs: Sequence[np.ndarray]) -> Outputs:
        request = self._request
        try:
            # The request only points at the arrays' memory, so they must stay referenced until it has run.
            arrays = [shareable(array, dtype) for array, dtype in zip(inputs, self._input_dtypes, strict=True)]
            for index, array in enumerate(arrays):
                request.set_input_tensor(index, self._tensor_type(array, shared_memory=True))
            request.infer()
        except (RuntimeError, TypeError, ValueError) as error:
            raise self._input_error(inputs, error) from None
        return [request.get_output_tensor(index).data.copy() for index in range(len(self.outputs))]

    def _input_error(self, inputs: Sequence[np.ndarray], error: BaseException) -> ModelMismatchError:
        given = ", ".join(f"{np.asarray(x).dtype}{list(np.shape(x))}" for x in inputs)
        wanted = ", ".join(f"{spec.name}: {spec.dtype}{list(spec.shape)}" for spec in self.inputs)
        return ModelMismatchError(
            f"OpenVINO refused the inputs ({given}); the model takes ({wanted}): {first_line(error)}"
        )

    def async_runner(self, callback: Callback, max_in_flight: int | None = None) -> AsyncRunner:
        if max_in_flight is None:
            # Twice the optimal count keeps one request queued behind each busy stream, so the device never
            # idles while Python turns a finished request around (about 10% more throughput on small models).
            queued = 2 * int(self._compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
            max_in_flight = min(queued, self._options.max_in_flight or queued)
        return OpenVinoAsyncRunner(self._compiled, max(1, max_in_flight), callback)

    def close(self) -> None:
        self._request = None
        self._compiled = None
