"""Ultralytics YOLO exports describe themselves; packages are made from that, so the user need not type it.

Ultralytics' exporter writes its model metadata into every ONNX file (`metadata_props`, each value a
`str()` of the Python value: `names` a dict literal, `imgsz` a list literal) and beside every OpenVINO IR
(`metadata.yaml`, plain YAML). The YOLOv5 repository writes `stride` and `names` into its ONNX files the
same way. From it come the task, the class names and the input size; the preprocessing is what
Ultralytics' `predict` does (letterbox centred with grey 114 borders, BGR to RGB, /255, no mean or std;
classifiers: shortest side to size, then a centre crop), which is not in the metadata but fixed in their
code. Detection and classification exports get their decoder (`yolo`, `classification`). Segmentation,
pose and oriented-box exports get the input spec and labels but no decoder, because edge_runtime has no
decoder for instance masks, multi-person keypoints or rotated boxes: their package is `raw`.

Not read: `description`, `author`, `date`, `version`, `license`, `docs`, `args` (export arguments),
`kpt_shape` beyond checking it, OpenVINO's `rt_info` (it repeats the same facts), and the metadata of other
Ultralytics formats (TFLite, TorchScript, CoreML, ...).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from edge_runtime.backends.base import TensorSpec
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.manifest import DecoderSpec, Task
from edge_runtime.package.onnx_metadata import read_metadata_props

__all__ = ["ModelHints", "export_hints", "read_export_metadata"]

ULTRALYTICS_PAD_VALUE = 114  # ultralytics/data/augment.py LetterBox: the grey the models are trained on
OPENVINO_METADATA = "metadata.yaml"
KNOWN_TASKS = ("detect", "classify", "segment", "pose", "obb")
# Ultralytics' predict defaults (conf, iou, max_det), so a package reports what `yolo predict` reports.
YOLO_PARAMS: dict[str, Any] = {
    "layout": "v8",
    "coordinates": "pixels",
    "min_score": 0.25,
    "iou_threshold": 0.7,
    "max_detections": 300,
}
_NO_DECODER = {
    "segment": "instance masks (mask coefficients and prototypes)",
    "pose": "keypoints of several people (a keypoint head on every candidate box)",
    "obb": "oriented boxes (an angle per candidate box)",
}


@dataclass(frozen=True)
class ModelHints:
    """What a model file says about itself; each piece is used only where the user gave nothing."""

    task: Task | None = None
    labels: tuple[str, ...] = ()
    input_fields: dict[str, Any] = field(default_factory=dict)
    decoder: DecoderSpec | None = None
    decoder_problem: str | None = None  # why the task the file names gets no decoder from it

    def task_name(self, given: str | None) -> str | None:
        return given if given is not None or self.task is None else self.task.value

    def decoder_choice(self, task: str | None, name: str | None, params: str | None) -> tuple[str | None, str | None]:
        """The decoder name and parameters to use: the user's, or the file's when the user named neither a decoder
        nor another task. Raises where the file's task needs a decoder its outputs do not fit."""
        if name is not None or (task is not None and task != self.task_name(None)):
            return name, params
        if self.decoder_problem is not None:
            raise EdgeRuntimeError(self.decoder_problem)
        if self.decoder is None:
            return name, params
        return self.decoder.name, json.dumps(self.decoder.params)


def read_export_metadata(model: Path) -> tuple[Path, Mapping[Any, Any]] | None:
    """The file holding an Ultralytics export's metadata and its values, or None for other models: an ONNX
    file's own `metadata_props`, or the `metadata.yaml` beside an OpenVINO IR."""
    if model.suffix == ".onnx":
        values = read_metadata_props(model)
        return (model, values) if _is_ultralytics(values) else None
    if model.suffix == ".xml":
        path = model.parent / OPENVINO_METADATA
        if not path.is_file():
            return None
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            raise EdgeRuntimeError(f"{path}: cannot read the Ultralytics metadata beside the model: {error}") from None
        return (path, data) if isinstance(data, dict) and _is_ultralytics(data) else None
    return None


def export_hints(
    file: Path,
    values: Mapping[Any, Any],
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    warn: Callable[[str], None],
) -> ModelHints:
    """What the metadata says, checked against the model's tensors; what a package cannot use is `warn`ed."""
    return _hints(_Metadata(file, values), inputs, outputs, warn)


def _is_ultralytics(values: Mapping[Any, Any]) -> bool:
    """Ultralytics' exporter and YOLOv5's both write `stride` and `names`; Ultralytics also signs `author`."""
    return values.get("author") == "Ultralytics" or ("names" in values and "stride" in values)


class _Metadata:
    """The metadata's values, each checked as it is read; a bad one is named with its file and key."""

    def __init__(self, file: Path, values: Mapping[Any, Any]) -> None:
        self.file = file
        self.values = values

    def problem(self, key: str, what: str) -> EdgeRuntimeError:
        return EdgeRuntimeError(f"{self.file}: Ultralytics metadata {key!r} {what}")

    def literal(self, key: str) -> Any:
        """The value as Python data: ONNX holds `str()` of it, read with `ast.literal_eval` (never `eval`)."""
        value = self.values.get(key)
        if not isinstance(value, str):
            return value
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise self.problem(key, f"is not a Python literal: {_shown(value)}") from None

    def task(self) -> str:
        task = self.values.get("task", "detect")  # YOLOv5's exports are detectors and name no task
        if task not in KNOWN_TASKS:
            raise self.problem("task", f"is {_shown(task)}; this converter knows {', '.join(KNOWN_TASKS)}")
        return str(task)

    def names(self) -> tuple[str, ...]:
        names = self.literal("names")
        if isinstance(names, dict) and all(isinstance(k, int) for k in names):
            if sorted(names) != list(range(len(names))):
                raise self.problem("names", f"must number its classes 0 to {len(names) - 1}, got {sorted(names)}")
            names = [names[i] for i in range(len(names))]
        if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
            raise self.problem("names", f"is not a dict of class index to name: {_shown(self.values.get('names'))}")
        return tuple(names)

    def integer(self, key: str, default: int | None) -> int | None:
        if key not in self.values:
            return default
        value = self.literal(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.problem(key, f"is not a positive whole number: {_shown(self.values[key])}")
        return value

    def imgsz(self) -> tuple[int, int] | None:
        """(height, width); Ultralytics writes [h, w] and older exports one number for a square."""
        if "imgsz" not in self.values:
            return None
        value = self.literal("imgsz")
        sizes = [value] if isinstance(value, int) else value
        if (
            not isinstance(sizes, (list, tuple))
            or len(sizes) not in (1, 2)
            or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes)
        ):
            raise self.problem("imgsz", f"is not [height, width] in pixels: {_shown(self.values['imgsz'])}")
        return (sizes[0], sizes[-1])

    def kpt_shape(self) -> tuple[int, int] | None:
        value = self.literal("kpt_shape") if "kpt_shape" in self.values else None
        if value is None:
            return None
        if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(isinstance(v, int) for v in value):
            raise self.problem("kpt_shape", f"is not [keypoints, values per keypoint]: {_shown(value)}")
        return (value[0], value[1])


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _hints(
    meta: _Metadata, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], warn: Callable[[str], None]
) -> ModelHints:
    task, names = meta.task(), meta.names()
    meta.integer("stride", None)
    input_fields = _input_fields(meta, inputs, task)
    if task == "classify":
        decoder, problem = _classification_decoder(meta, names, outputs)
        return ModelHints(Task.CLASSIFICATION, names, input_fields, decoder, problem)
    if task == "detect":
        decoder, problem = _yolo_decoder(meta, names, outputs)
        return ModelHints(Task.DETECTION, names, input_fields, decoder, problem)
    kpt_shape = meta.kpt_shape()
    keypoints = f" ({kpt_shape[0]} keypoints)" if kpt_shape else ""
    warn(
        f"{meta.file.name} is an Ultralytics {task} model{keypoints}: edge_runtime has no decoder for "
        f"{_NO_DECODER[task]}, so the package is raw (labels and input spec are set); give --task and --decoder "
        "to choose otherwise"
    )
    return ModelHints(Task.RAW, names, input_fields)


def _input_fields(meta: _Metadata, inputs: Sequence[TensorSpec], task: str) -> dict[str, Any]:
    """The input spec of Ultralytics' predict: RGB /255, letterboxed on grey, or centre-cropped for classifiers."""
    if len(inputs) != 1 or len(inputs[0].shape) != 4:
        shapes = [list(t.shape) for t in inputs]
        raise EdgeRuntimeError(
            f"{meta.file}: an Ultralytics export has one [batch, channels, height, width] input, "
            f"this model has {shapes}"
        )
    tensor = inputs[0]
    channels = meta.integer("channels", 3)
    imgsz = meta.imgsz()
    expected = (meta.integer("batch", None), channels, *(imgsz or (None, None)))
    keys = ("batch", "channels", "imgsz", "imgsz")
    for dim, wanted, key in zip(tensor.shape, expected, keys, strict=True):
        if dim is not None and wanted is not None and dim != wanted:
            raise meta.problem(
                key,
                f"is {_shown(meta.values.get(key))} but the model input {tensor.name!r} has shape "
                f"{['?' if d is None else d for d in tensor.shape]}",
            )
    fields: dict[str, Any] = {
        "layout": "NCHW",
        "std": (255.0,),
        "resize": "crop" if task == "classify" else "letterbox",
    }
    if channels in (1, 3):
        fields["color_order"] = "RGB" if channels == 3 else "GRAY"
    if task != "classify":
        fields["pad_value"] = (ULTRALYTICS_PAD_VALUE,)
    if any(d is None for d in tensor.shape[1:]) and imgsz is not None:
        fields["shape"] = (1, channels, *imgsz)
    return fields


def _yolo_decoder(
    meta: _Metadata, names: tuple[str, ...], outputs: Sequence[TensorSpec]
) -> tuple[DecoderSpec | None, str | None]:
    """`yolo` for the raw head [1, 4 + classes, anchors] (or YOLOv5's [1, anchors, 5 + classes])."""
    shape = list(outputs[0].shape) if outputs else []
    attributes = shape[1:] if len(shape) == 3 else []
    for layout, size in (("v8", 4 + len(names)), ("v5", 5 + len(names))):
        if size in attributes:
            return DecoderSpec(name="yolo", params={**YOLO_PARAMS, "layout": layout}), None
    shown = ["?" if d is None else d for d in shape]
    return None, (
        f"{meta.file}: Ultralytics detect model with {len(names)} classes, but its first output has shape {shown}, "
        f"not the raw head [1, {4 + len(names)}, anchors] the yolo decoder reads (exports with nms=True and "
        "end-to-end models emit boxes after NMS); export it with nms=False, or give --task and --decoder yourself"
    )


def _classification_decoder(
    meta: _Metadata, names: tuple[str, ...], outputs: Sequence[TensorSpec]
) -> tuple[DecoderSpec | None, str | None]:
    """Ultralytics' classify head ends in a softmax: [1, classes] probabilities."""
    shape = list(outputs[0].shape) if outputs else []
    if shape[-1:] == [len(names)]:
        return DecoderSpec(name="classification", params={"activation": "none"}), None
    shown = ["?" if d is None else d for d in shape]
    return None, (
        f"{meta.file}: Ultralytics classify model with {len(names)} classes, but its first output has shape "
        f"{shown}, not [1, {len(names)}]; give --task and --decoder yourself"
    )
