"""A model package variant loaded on a backend, checked against what its manifest promises.

This is the seam between packages and backends: it verifies the files, loads the variant, and
refuses a model whose tensors disagree with the manifest, because a model fed the wrong shape or
layout does not fail, it silently answers wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_runtime.backends import load_backend
from edge_runtime.backends.base import Backend, BackendOptions, Outputs, TensorSpec
from edge_runtime.errors import ModelMismatchError
from edge_runtime.package.loader import ModelPackage
from edge_runtime.package.manifest import InputSpec


@dataclass
class LoadedModel:
    package: ModelPackage
    variant_id: str
    backend: Backend

    @property
    def inputs(self) -> list[TensorSpec]:
        return self.backend.inputs

    @property
    def outputs(self) -> list[TensorSpec]:
        return self.backend.outputs

    @property
    def input_specs(self) -> tuple[InputSpec, ...]:
        """The manifest's input specs, or specs read from the model for a bare file."""
        if self.package.manifest.inputs:
            return self.package.manifest.inputs
        return tuple(_spec_from_tensor(t) for t in self.backend.inputs)

    @property
    def label(self) -> str:
        runs_on = self.backend.runs_on
        return f"{runs_on.backend}:{runs_on.device} {self.variant_id} ({runs_on.precision})"

    def infer(self, inputs: Sequence[np.ndarray]) -> Outputs:
        return self.backend.infer(inputs)

    def close(self) -> None:
        self.backend.close()


def load_model(
    package: ModelPackage,
    variant_id: str,
    backend_key: str,
    options: BackendOptions | Mapping[str, Any] | None = None,
) -> LoadedModel:
    source = package.source(variant_id)
    backend = load_backend(backend_key, source, options)
    try:
        check_against_manifest(package, variant_id, backend)
    except ModelMismatchError:
        backend.close()
        raise
    return LoadedModel(package=package, variant_id=variant_id, backend=backend)


def check_against_manifest(package: ModelPackage, variant_id: str, backend: Backend) -> None:
    manifest = package.manifest
    where = f"model {manifest.name} variant {variant_id}"
    if manifest.inputs and len(manifest.inputs) != len(backend.inputs):
        raise ModelMismatchError(
            f"{where}: the manifest lists {len(manifest.inputs)} inputs, the model file has {len(backend.inputs)}"
        )
    for index, (spec, tensor) in enumerate(zip(manifest.inputs, backend.inputs, strict=False)):
        field = f"inputs[{index}]"
        if spec.name is not None and spec.name != tensor.name:
            raise ModelMismatchError(f"{where}: {field}.name is {spec.name!r}, the model's input is {tensor.name!r}")
        if not _shape_fits(spec.shape, tensor.shape):
            raise ModelMismatchError(
                f"{where}: {field}.shape is {list(spec.shape)}, the model's input {tensor.name!r} has shape "
                f"{_shape_text(tensor.shape)}"
            )
        if not _dtype_fits(spec, tensor):
            raise ModelMismatchError(
                f"{where}: {field}.dtype is {spec.dtype}, the model's input {tensor.name!r} is {tensor.dtype} "
                "without quantization parameters"
            )
    if manifest.output_names and len(manifest.output_names) != len(backend.outputs):
        raise ModelMismatchError(
            f"{where}: the manifest lists {len(manifest.output_names)} outputs, the model file has "
            f"{len(backend.outputs)}"
        )


def _shape_fits(expected: tuple[int, ...], actual: tuple[int | None, ...]) -> bool:
    return len(expected) == len(actual) and all(a is None or a == e for e, a in zip(expected, actual, strict=True))


def _shape_text(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _dtype_fits(spec: InputSpec, tensor: TensorSpec) -> bool:
    if spec.dtype == tensor.dtype:
        return True
    if tensor.quantization is not None:
        return True
    return spec.dtype.startswith("float") and tensor.dtype.startswith("float")


def _spec_from_tensor(tensor: TensorSpec) -> InputSpec:
    shape = tuple(1 if d is None else d for d in tensor.shape)
    layout: Any = "ANY"
    if len(shape) == 4:
        layout = "NCHW" if shape[1] in (1, 3) and shape[3] not in (1, 3) else "NHWC"
    return InputSpec(name=tensor.name, shape=shape, layout=layout, dtype=_manifest_dtype(tensor))


def _manifest_dtype(tensor: TensorSpec) -> Any:
    if tensor.quantization is not None:
        return "float32"
    known = ("float32", "float16", "uint8", "int8", "int32", "int64")
    return tensor.dtype if tensor.dtype in known else "float32"
