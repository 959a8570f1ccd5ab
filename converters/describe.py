"""What the package's manifest says besides its variants: input specs, labels, task and decoder.

The input spec is the one piece that must be right before anything else happens: calibration images
are preprocessed exactly as it says, so a wrong mean or colour order would calibrate the quantized
variants on inputs the model never sees in service.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from converters.errors import ConversionError
from converters.sources import SourceModel
from edge_runtime.backends.base import TensorSpec
from edge_runtime.config.base import describe_validation_error
from edge_runtime.package.manifest import InputSpec

_MANIFEST_DTYPES = ("float32", "float16", "uint8", "int8", "int32", "int64")


@dataclass(frozen=True)
class InputFlags:
    """Input-spec fields given on the command line; they describe the model's only input."""

    layout: str | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    color_order: str | None = None
    resize: str | None = None
    pad_value: tuple[int, ...] | None = None

    def fields(self) -> dict[str, Any]:
        return {key: value for key, value in vars(self).items() if value is not None}


def model_tensors(source: SourceModel) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The source's input and output tensors as OpenVINO reads them (every supported format goes through it)."""
    from edge_runtime.backends.openvino.backend import tensor_specs

    model = source.openvino_model()
    return tensor_specs(model.inputs, "input"), tensor_specs(model.outputs, "output")


def build_input_specs(
    tensors: Sequence[TensorSpec], spec_file: Path | None, flags: InputFlags, described: Mapping[str, Any] | None = None
) -> tuple[InputSpec, ...]:
    """One spec per model input: the flags, then the YAML file's fields, then what the model file describes of its
    only input (`described`, e.g. an Ultralytics export's metadata), then what its tensors say."""
    given = _read_spec_file(spec_file, len(tensors)) if spec_file else [{} for _ in tensors]
    if described and len(tensors) == 1:
        given[0] = {**described, **given[0]}
    if flags.fields():
        if len(tensors) != 1:
            raise ConversionError(
                "--layout/--mean/--std/--color-order/--resize/--pad-value describe one input, "
                f"the model has {len(tensors)}; describe each input in --input-spec YAML instead"
            )
        given[0] = {**given[0], **flags.fields()}
    return tuple(
        _spec_for(tensor, fields, index) for index, (tensor, fields) in enumerate(zip(tensors, given, strict=True))
    )


def _read_spec_file(path: Path, count: int) -> list[dict[str, Any]]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConversionError(f"cannot read input spec {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConversionError(f"input spec {path} is not valid YAML: {error}") from None
    if isinstance(data, dict) and "inputs" in data:
        data = data["inputs"]
    entries = [data] if isinstance(data, dict) else data
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ConversionError(f"input spec {path}: expected a mapping of input fields or a list of them")
    if len(entries) != count:
        raise ConversionError(f"input spec {path} describes {len(entries)} inputs, the model has {count}")
    return [dict(entry) for entry in entries]


def _spec_for(tensor: TensorSpec, fields: dict[str, Any], index: int) -> InputSpec:
    shape = fields.pop("shape", None)
    shape = tuple(shape) if shape is not None else _static_shape(tensor)
    fields.setdefault("layout", _guess_layout(shape))
    if _image_channels(shape, fields["layout"]) == 1:
        fields.setdefault("color_order", "GRAY")  # else images would be fed as three colour channels
    fields.setdefault("dtype", _manifest_dtype(tensor))
    try:
        return InputSpec(shape=shape, **fields)
    except ValidationError as error:
        problems = "; ".join(_input_field(index, line) for line in describe_validation_error(error))
        raise ConversionError(f"invalid input spec for model input {tensor.name!r}: {problems}") from None


def _image_channels(shape: tuple[int, ...], layout: str) -> int | None:
    if len(shape) != 4:
        return None
    return shape[3] if layout == "NHWC" else shape[1] if layout == "NCHW" else None


def _input_field(index: int, problem: str) -> str:
    top_level = "(top level): "
    if problem.startswith(top_level):
        return f"inputs[{index}]: {problem.removeprefix(top_level)}"
    return f"inputs[{index}].{problem}"


def _static_shape(tensor: TensorSpec) -> tuple[int, ...]:
    """The input shape with a dynamic batch pinned to 1; other dynamic dimensions must be given."""
    dims = list(tensor.shape)
    if dims and dims[0] is None:
        dims[0] = 1
    if not dims or any(d is None for d in dims):
        shown = "[" + ", ".join("?" if d is None else str(d) for d in tensor.shape) + "]"
        raise ConversionError(
            f"model input {tensor.name!r} has shape {shown} with dynamic dimensions; give its static shape "
            "in --input-spec (e.g. 'shape: [1, 3, 224, 224]')"
        )
    return tuple(int(d) for d in dims if d is not None)


def _guess_layout(shape: tuple[int, ...]) -> str:
    if len(shape) == 4:
        return "NCHW" if shape[1] in (1, 3) and shape[3] not in (1, 3) else "NHWC"
    if len(shape) == 2:
        return "NC"
    return "ANY"


def _manifest_dtype(tensor: TensorSpec) -> str:
    return tensor.dtype if tensor.dtype in _MANIFEST_DTYPES else "float32"
