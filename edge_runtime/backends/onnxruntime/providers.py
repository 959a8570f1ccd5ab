"""ONNX Runtime's execution providers: the options naming a device, and the provider chain built from them.

ONNX Runtime is not imported here; the chain is plain data that `InferenceSession(providers=...)` takes.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from edge_runtime.backends.base import BackendOptions
from edge_runtime.errors import ConfigError
from edge_runtime.package.manifest import Precision

# Logged under the backend's name, the one logger a user sets up for ONNX Runtime.
log = logging.getLogger("edge_runtime.backends.onnxruntime.backend")

CPU, CUDA, TENSORRT, OPENVINO = (
    "CPUExecutionProvider",
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
    "OpenVINOExecutionProvider",
)
PROVIDER_PACKAGES = {CUDA: "onnxruntime-gpu", TENSORRT: "onnxruntime-gpu", OPENVINO: "onnxruntime-openvino"}
DEVICE_KINDS = {CPU: "CPU", CUDA: "CUDA", TENSORRT: "TENSORRT", OPENVINO: "OPENVINO"}
GPU_PROVIDERS = frozenset({CUDA, TENSORRT})
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


def prepare_engine_cache(path: Path) -> None:
    if path.resolve().is_relative_to(Path(tempfile.gettempdir()).resolve()):
        log.warning("TensorRT engine cache %s is in the temporary directory; engines rebuild after reboot", path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot create the TensorRT engine cache {path}: {error.strerror}") from None


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


def device_kind(device: str) -> str:
    """ "cuda:1" -> "CUDA": the execution-provider kind the probe lists devices by."""
    return device.partition(":")[0].upper()


def provider_problem(device: str, listed: Sequence[str]) -> str | None:
    """Why this build of ONNX Runtime has no execution provider for `device`, or None."""
    kind = device_kind(device)
    if kind in listed:
        return None
    hint = "; CUDA and TensorRT need an onnxruntime-gpu build" if kind in ("CUDA", "TENSORRT") else ""
    return f"onnxruntime has no {kind} execution provider (it has: {', '.join(listed) or 'none'}){hint}"
