"""Registry of accelerator backends.

Backends are found by key; their modules are imported on first use and import their library lazily
in turn, so listing or probing backends never fails because one library is missing. A new backend is
one module beside these with a `Backend` subclass, plus one line in `_MODULES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from edge_runtime.backends.base import Backend, BackendOptions, BackendStatus, ModelSource
from edge_runtime.errors import ConfigError

_MODULES: dict[str, str] = {
    "openvino": "edge_runtime.backends.openvino",
    "litert": "edge_runtime.backends.litert",
    "onnxruntime": "edge_runtime.backends.onnxruntime",
}


def backend_keys() -> list[str]:
    return list(_MODULES)


def backend_class(key: str) -> type[Backend]:
    if key not in _MODULES:
        raise ConfigError(f"unknown backend {key!r}; known backends: {', '.join(_MODULES)}")
    module = importlib.import_module(_MODULES[key])
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, Backend) and getattr(value, "key", None) == key:
            return value
    raise ConfigError(f"module {_MODULES[key]} defines no Backend with key {key!r}")


def probe_backends() -> dict[str, BackendStatus]:
    return {key: backend_class(key).probe() for key in _MODULES}


def make_options(key: str, options: BackendOptions | Mapping[str, Any] | None = None) -> BackendOptions:
    """Validate options for a backend; errors name the backend and the offending option."""
    from pydantic import ValidationError

    options_type = backend_class(key).options_type
    if isinstance(options, options_type):
        return options
    if isinstance(options, BackendOptions):
        options = options.model_dump(exclude_unset=True)
    try:
        return options_type.model_validate(dict(options or {}))
    except ValidationError as error:
        from edge_runtime.package.manifest import describe_validation_error

        problems = "; ".join(describe_validation_error(error))
        raise ConfigError(f"invalid options for backend {key}: {problems}") from None


def load_backend(key: str, source: ModelSource, options: BackendOptions | Mapping[str, Any] | None = None) -> Backend:
    cls = backend_class(key)
    if source.format not in cls.formats:
        formats = ", ".join(sorted(f.value for f in cls.formats))
        raise ConfigError(f"backend {key} cannot load {source.format.value} models (it loads: {formats})")
    return cls(source, make_options(key, options))
