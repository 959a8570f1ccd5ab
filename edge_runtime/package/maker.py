"""A package from a model file that needs no conversion: an ONNX, OpenVINO IR or TFLite export as it is.

`edge-convert` builds variants per backend and precision and needs the whole toolchain for it; a model
someone exported themselves (Ultralytics' `yolo export format=onnx` or `format=openvino`) usually runs as
it is. Packaging it records what a bare file cannot say: the task, the labels, how a camera frame
becomes its input and which decoder reads its output (from an Ultralytics export's own metadata, or
from the user), beside the file's sha256, so the box checks it before every load.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from edge_runtime.backends.base import TensorSpec
from edge_runtime.config.base import describe_validation_error
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.loader import companion_files, manifest_for_bare_file
from edge_runtime.package.manifest import DecoderSpec, InputSpec, Manifest, Task
from edge_runtime.package.ultralytics import ModelHints, export_hints, read_export_metadata
from edge_runtime.package.writer import describe_variant, write_package

__all__ = ["PackageRequest", "make_package", "parse_decoder", "parse_labels", "parse_task"]


@dataclass(frozen=True)
class PackageRequest:
    """What the user gave; None leaves the choice to the model's own metadata."""

    model: Path
    out_dir: Path
    name: str | None = None
    version: str = "1"
    task: str | None = None
    labels: tuple[str, ...] = ()
    decoder: str | None = None
    decoder_params: str | None = None


def parse_labels(value: str | None) -> tuple[str, ...]:
    """Labels from a file (one per line) or a comma-separated list."""
    if not value:
        return ()
    path = Path(value)
    if path.is_file():
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise EdgeRuntimeError(f"cannot read labels file {path}: {error}") from None
        labels = tuple(line.strip() for line in lines if line.strip())
        if not labels:
            raise EdgeRuntimeError(f"labels file {path} is empty")
        return labels
    return tuple(label.strip() for label in value.split(",") if label.strip())


def parse_task(value: str | None, labelled: bool) -> Task:
    """The task named, else classification when labels or class indices are given, else raw."""
    if value is None:
        return Task.CLASSIFICATION if labelled else Task.RAW
    try:
        return Task(value)
    except ValueError:
        known = ", ".join(task.value for task in Task)
        raise EdgeRuntimeError(f"--task {value!r} is not a task; choose one of {known}") from None


def parse_decoder(name: str | None, params_json: str | None, labels: tuple[str, ...]) -> DecoderSpec | None:
    """The decoder spec, checked by building the decoder the runtime would build."""
    from edge_runtime.decoders import make_decoder

    if name is None:
        if params_json:
            raise EdgeRuntimeError("--decoder-params needs --decoder NAME")
        return None
    try:
        params = json.loads(params_json) if params_json else {}
    except json.JSONDecodeError as error:
        raise EdgeRuntimeError(f"--decoder-params is not valid JSON: {error}") from None
    if not isinstance(params, dict):
        raise EdgeRuntimeError("--decoder-params must be a JSON object")
    try:
        make_decoder(name, params, labels)
    except EdgeRuntimeError as error:
        raise EdgeRuntimeError(f"--decoder {name}: {error}") from None
    return DecoderSpec(name=name, params=params)


def make_package(
    request: PackageRequest,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    warn: Callable[[str], None],
) -> Manifest:
    """Write the package for `request.model`, whose tensors (as a backend read them) are `inputs` and `outputs`."""
    model, out_dir = request.model, request.out_dir
    bare = manifest_for_bare_file(model)
    found = read_export_metadata(model)
    hints = ModelHints() if found is None else export_hints(found[0], found[1], inputs, outputs, warn)
    labels = request.labels or hints.labels
    task = parse_task(hints.task_name(request.task), labelled=False)
    decoder = parse_decoder(*hints.decoder_choice(request.task, request.decoder, request.decoder_params), labels)
    specs = _input_specs(hints, inputs) if hints.input_fields else ()
    if out_dir.exists() and any(out_dir.iterdir()):
        raise EdgeRuntimeError(f"{out_dir} is not empty: give a new folder for the package")
    [(variant_id, variant)] = bare.variants.items()
    files = [model, *companion_files(model)]
    names = [f"{variant_id}/model{path.suffix}" for path in files]
    (out_dir / variant_id).mkdir(parents=True, exist_ok=True)
    for source, name in zip(files, names, strict=True):
        shutil.copyfile(source, out_dir / name)
    entry = describe_variant(out_dir, names, variant.format, variant.precision, target=variant.target)
    return write_package(
        out_dir,
        {variant_id: entry},
        name=request.name or model.stem,
        version=request.version,
        task=task,
        description=f"Packaged from {model.name} as it is, by edge-runtime package make",
        inputs=specs,
        output_names=tuple(t.name for t in outputs),
        labels=labels,
        decoder=decoder,
    )


def _input_specs(hints: ModelHints, inputs: Sequence[TensorSpec]) -> tuple[InputSpec, ...]:
    """The one image input, described as the metadata says; its fixed size from the metadata when dynamic."""
    fields = dict(hints.input_fields)
    [tensor] = inputs
    shape = fields.pop("shape", tensor.shape)
    if any(dim is None for dim in shape):
        raise EdgeRuntimeError(
            f"model input {tensor.name!r} has dynamic dimensions {list(shape)} and the metadata gives no size"
        )
    described = {"name": tensor.name, "shape": tuple(shape), "dtype": tensor.dtype, **fields}
    try:
        return (InputSpec.model_validate(described),)
    except ValidationError as error:
        raise EdgeRuntimeError(f"model input {tensor.name!r}: {'; '.join(describe_validation_error(error))}") from None
