"""Registry of accelerator backends: one record per backend, read by everything that needs to know one.

A backend is a sub-package here (its options, devices, runner and preprocessing beside its `Backend`
subclass) plus one record in `BACKENDS`: which model formats it loads, which of its own it prefers, and
where its class lives. The class is imported on first use and imports its library lazily in turn, so
listing or probing backends never fails because one library is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from edge_runtime.backends.base import Backend, BackendOptions, BackendStatus, ModelSource
from edge_runtime.config.registry import load_class
from edge_runtime.errors import ConfigError, UnknownNameError
from edge_runtime.package.manifest import ModelFormat

__all__ = [
    "BACKENDS",
    "BackendKey",
    "BackendRecord",
    "backend_class",
    "backend_for_format",
    "load_backend",
    "make_options",
    "probe_backends",
]

BackendKey = Literal["openvino", "litert", "onnxruntime"]  # the keys of BACKENDS, for config validation


@dataclass(frozen=True)
class BackendRecord:
    key: str
    module: str
    class_name: str
    formats: frozenset[ModelFormat]  # what it loads
    native_format: ModelFormat  # the format it runs the fp32 reference of, and converted packages target
    default_variants: tuple[str, ...]  # variant patterns tried when a choice names none, best first


BACKENDS: dict[str, BackendRecord] = {
    "openvino": BackendRecord(
        "openvino",
        "edge_runtime.backends.openvino.backend",
        "OpenVinoBackend",
        frozenset({ModelFormat.OPENVINO, ModelFormat.ONNX, ModelFormat.TFLITE}),
        ModelFormat.OPENVINO,
        ("openvino/*", "onnx/*", "tflite/*"),
    ),
    "litert": BackendRecord(
        "litert",
        "edge_runtime.backends.litert.backend",
        "LiteRtBackend",
        frozenset({ModelFormat.TFLITE}),
        ModelFormat.TFLITE,
        ("tflite/*",),
    ),
    "onnxruntime": BackendRecord(
        "onnxruntime",
        "edge_runtime.backends.onnxruntime.backend",
        "OnnxRuntimeBackend",
        frozenset({ModelFormat.ONNX}),
        ModelFormat.ONNX,
        ("onnx/*",),
    ),
}


def backend_record(key: str) -> BackendRecord:
    if key not in BACKENDS:
        raise UnknownNameError("backend", key, tuple(BACKENDS))
    return BACKENDS[key]


def backend_class(key: str) -> type[Backend]:
    return load_class("backend", key, {k: (r.module, r.class_name) for k, r in BACKENDS.items()}, Backend)


def backend_for_format(model_format: ModelFormat) -> str:
    """The backend whose own format this is: the one that runs a package's fp32 reference of that format."""
    return next(record.key for record in BACKENDS.values() if record.native_format is model_format)


def probe_backends() -> dict[str, BackendStatus]:
    return {key: backend_class(key).probe() for key in BACKENDS}


def make_options(key: str, options: BackendOptions | Mapping[str, Any] | None = None) -> BackendOptions:
    """Validate options for a backend; errors name the backend and the offending option."""
    from pydantic import ValidationError

    from edge_runtime.config.base import describe_validation_error

    options_type = backend_class(key).options_type
    if isinstance(options, options_type):
        return options
    if isinstance(options, BackendOptions):
        options = options.model_dump(exclude_unset=True)
    try:
        return options_type.model_validate(dict(options or {}))
    except ValidationError as error:
        problems = "; ".join(describe_validation_error(error))
        raise ConfigError(f"invalid options for backend {key}: {problems}") from None


def load_backend(key: str, source: ModelSource, options: BackendOptions | Mapping[str, Any] | None = None) -> Backend:
    record = backend_record(key)
    if source.format not in record.formats:
        formats = ", ".join(sorted(f.value for f in record.formats))
        raise ConfigError(f"backend {key} cannot load {source.format.value} models (it loads: {formats})")
    return backend_class(key)(source, make_options(key, options))
