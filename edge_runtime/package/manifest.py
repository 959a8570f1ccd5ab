"""The model manifest (`model.yaml`): what a model package promises about its model.

The schema is versioned (`schema_version`) and strict: an unknown or misspelt field is an error,
because a silently ignored `mean:` or `layout:` would feed the model wrong numbers without anyone
noticing. Validation problems are reported with the dotted path of the field at fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator

from edge_runtime.config.base import StrictModel, describe_validation_error
from edge_runtime.errors import ManifestError

SCHEMA_VERSION = 1
MANIFEST_NAME = "model.yaml"
# Points of drop beyond which edge-convert flags a variant "do not ship" (its --drop-threshold default),
# for manifests that record a drop but not the threshold it was judged by.
DEFAULT_DROP_THRESHOLD = 1.0


class Task(str, Enum):
    CLASSIFICATION = "classification"
    DETECTION = "detection"
    SEGMENTATION = "segmentation"
    KEYPOINTS = "keypoints"
    REGRESSION = "regression"
    ANOMALY = "anomaly"
    RAW = "raw"


class ModelFormat(str, Enum):
    OPENVINO = "openvino"
    TFLITE = "tflite"
    ONNX = "onnx"


class Precision(str, Enum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"


MODEL_SUFFIXES: dict[str, ModelFormat] = {
    ".xml": ModelFormat.OPENVINO,
    ".tflite": ModelFormat.TFLITE,
    ".onnx": ModelFormat.ONNX,
}

Layout = Literal["NHWC", "NCHW", "NC", "NTC", "NCT", "ANY"]
DType = Literal["float32", "float16", "uint8", "int8", "int32", "int64"]
PixelValue = Annotated[int, Field(ge=0, le=255)]


def _one_value_for_every_channel(value: object) -> object:
    """`pad_value: 114` means 114 in every channel, as `[114]` does."""
    return (value,) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


PadValue = Annotated[tuple[PixelValue, ...], BeforeValidator(_one_value_for_every_channel)]


class InputSpec(StrictModel):
    """How raw data becomes the model's input tensor, in the float domain of the fp32 model.

    Quantized variants carry their own scale and zero point inside the model file; the runtime reads
    them from there rather than from the manifest, so one manifest serves every variant.

    `pad_value` is the colour of the letterbox border, in 0-255 pixel values before mean and std, one
    value or one per channel in `color_order`. A model sees its training border in every non-square
    frame, so a border of another colour shifts its scores (Ultralytics trains on grey 114); without it
    the border is black (0), as it always was.
    """

    name: str | None = None
    shape: tuple[int, ...] = Field(min_length=1)
    layout: Layout = "ANY"
    dtype: DType = "float32"
    color_order: Literal["RGB", "BGR", "GRAY"] | None = None
    resize: Literal["stretch", "letterbox", "crop"] = "stretch"
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    pad_value: PadValue | None = None

    @field_validator("shape")
    @classmethod
    def _positive_dims(cls, shape: tuple[int, ...]) -> tuple[int, ...]:
        if any(d <= 0 for d in shape):
            raise ValueError(f"every dimension must be positive, got {list(shape)}")
        return shape

    @model_validator(mode="after")
    def _normalisation_matches_channels(self) -> InputSpec:
        channels = self.channels
        for field in ("mean", "std"):
            values = getattr(self, field)
            if values is not None and channels is not None and len(values) not in (1, channels):
                raise ValueError(f"{field} has {len(values)} values but the input has {channels} channels")
        if self.std is not None and any(s == 0 for s in self.std):
            raise ValueError("std must not contain zero")
        pads = self.pad_values
        if not pads:
            raise ValueError("pad_value needs one value, or one per channel")
        if channels is not None and len(pads) not in (1, channels):
            raise ValueError(f"pad_value has {len(pads)} values but the input has {channels} channels")
        return self

    @property
    def pad_values(self) -> tuple[int, ...]:
        """The letterbox border per channel in `color_order` (one value for all); black when unset."""
        return (0,) if self.pad_value is None else self.pad_value

    @property
    def channels(self) -> int | None:
        if self.layout == "NHWC" and len(self.shape) == 4:
            return self.shape[3]
        if self.layout == "NCHW" and len(self.shape) == 4:
            return self.shape[1]
        return None

    @property
    def spatial_size(self) -> tuple[int, int] | None:
        """(height, width) for image inputs."""
        if self.layout == "NHWC" and len(self.shape) == 4:
            return self.shape[1], self.shape[2]
        if self.layout == "NCHW" and len(self.shape) == 4:
            return self.shape[2], self.shape[3]
        return None


class DecoderSpec(StrictModel):
    """Names the output decoder and its parameters; the decoder validates its own parameters."""

    name: str
    params: dict[str, Any] = Field(default_factory=dict)


class VariantFile(StrictModel):
    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @field_validator("path")
    @classmethod
    def _relative_inside_package(cls, path: str) -> str:
        p = Path(path)
        if p.is_absolute() or ".." in p.parts:
            raise ValueError(f"must be a relative path inside the package, got {path!r}")
        return path


@dataclass(frozen=True)
class AccuracyDrop:
    """What conversion cost a variant against the fp32 reference, and the most the converter let it cost."""

    points: float
    threshold: float
    threshold_recorded: bool
    measure: str  # which figure the points are: top1, map50, top1_agreement or output_error

    @property
    def too_large(self) -> bool:
        """The converter's "do not ship" verdict: more lost than the threshold allows."""
        return self.points > self.threshold

    def describe(self) -> str:
        """E.g. 'lost 3.2 points of top-1 in conversion (threshold 1.0)'."""
        points = _figure(self.points)
        what = {
            "map50": f"lost {points} points of mAP@0.5 in conversion",
            "top1": f"lost {points} points of top-1 in conversion",
            "top1_agreement": f"changed the predicted class of {points}% of samples in conversion",
        }.get(self.measure, f"moved its outputs by {points}% of their range in conversion")
        default = "" if self.threshold_recorded else ", edge-convert's default: the manifest records none"
        return f"{what} (threshold {_figure(self.threshold)}{default})"


def _figure(value: float) -> str:
    text = f"{value:.2f}"
    return text[:-1] if text.endswith("0") else text


class MeasuredOn(StrictModel):
    """The CPU that measured a variant's accuracy, by the features that choose its int8 kernels.

    An int8 variant can compute other integers on a CPU whose int8 features differ (x86 without VNNI
    saturates where VNNI does not), so a box with other features checks the variant before trusting
    its recorded accuracy.
    """

    cpu: str
    int8_features: tuple[str, ...] = Field(min_length=1)  # the architecture first, e.g. (x86_64, avx2)


class Variant(StrictModel):
    """One file set of the model: a format at a precision, possibly sparse or compiled for a target.

    `accuracy` holds what the converter measured; `drop_points` (what conversion cost, in the points of the
    first of mAP@0.5, top-1, class agreement or output error that was measured) and `drop_threshold` (the
    most it was allowed to cost) decide whether selection passes the variant over. For int8 variants,
    `probe_error` is the mean output error against the fp32 variant on the fidelity probe's inputs, as a
    fraction of the output range: the figure a box measures again when its CPU differs from `measured_on`.
    """

    format: ModelFormat
    precision: Precision
    files: tuple[VariantFile, ...] = Field(min_length=1)
    sparsity: float = Field(default=0.0, ge=0.0, le=1.0)
    target: Literal["edgetpu"] | None = None
    accuracy: dict[str, float] = Field(default_factory=dict)
    measured_on: MeasuredOn | None = None
    size_bytes: int | None = Field(default=None, ge=0)

    @field_validator("accuracy")
    @classmethod
    def _threshold_not_negative(cls, accuracy: dict[str, float]) -> dict[str, float]:
        if accuracy.get("drop_threshold", 0.0) < 0:
            raise ValueError(f"drop_threshold must not be negative, got {accuracy['drop_threshold']}")
        return accuracy

    @model_validator(mode="after")
    def _main_file_suffix(self) -> Variant:
        suffix = Path(self.files[0].path).suffix
        if MODEL_SUFFIXES.get(suffix) is not self.format:
            raise ValueError(f"first file {self.files[0].path!r} is not a {self.format.value} model file")
        if self.target == "edgetpu" and self.format is not ModelFormat.TFLITE:
            raise ValueError("target edgetpu is only valid for tflite variants")
        return self

    @property
    def model_file(self) -> str:
        return self.files[0].path

    @property
    def accuracy_drop(self) -> AccuracyDrop | None:
        """The recorded drop, measured as the converter measured it; None when none was recorded."""
        accuracy = self.accuracy
        if "drop_points" not in accuracy:
            return None
        threshold = accuracy.get("drop_threshold")
        measures = ("map50", "top1", "top1_agreement_vs_fp32")
        measure = next((m for m in measures if m in accuracy), "output_error").removesuffix("_vs_fp32")
        return AccuracyDrop(
            accuracy["drop_points"],
            DEFAULT_DROP_THRESHOLD if threshold is None else threshold,
            threshold is not None,
            measure,
        )


class Manifest(StrictModel):
    schema_version: int
    name: str = Field(min_length=1)
    version: str = "0"
    task: Task = Task.RAW
    description: str = ""
    license: str | None = None
    inputs: tuple[InputSpec, ...] = ()
    output_names: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    decoder: DecoderSpec | None = None
    variants: dict[str, Variant] = Field(min_length=1)

    @field_validator("schema_version")
    @classmethod
    def _supported_version(cls, version: int) -> int:
        if version != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {version}; this runtime reads version {SCHEMA_VERSION}")
        return version

    @field_validator("variants")
    @classmethod
    def _variant_ids(cls, variants: dict[str, Variant]) -> dict[str, Variant]:
        for variant_id in variants:
            if not variant_id or variant_id.count("/") != 1:
                raise ValueError(f"variant id {variant_id!r} must look like 'format/name', e.g. 'tflite/int8'")
        return variants


def parse_manifest(data: object, source: str) -> Manifest:
    if not isinstance(data, dict):
        raise ManifestError(source, ["(top level): expected a mapping of fields"])
    try:
        return Manifest.model_validate(data)
    except ValidationError as error:
        raise ManifestError(source, describe_validation_error(error)) from None


def read_manifest(path: Path) -> Manifest:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ManifestError(str(path), [f"cannot read: {error.strerror}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ManifestError(str(path), [f"not valid YAML: {error}"]) from None
    return parse_manifest(data, str(path))


class _ManifestDumper(yaml.SafeDumper):
    """Writes short lists of numbers inline (`shape: [1, 128, 128, 3]`) so manifests stay readable."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    inline = all(isinstance(item, (int, float, str)) for item in data) and len(data) <= 16
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=inline)


_ManifestDumper.add_representer(list, _represent_list)


def dump_manifest(manifest: Manifest) -> str:
    data = manifest.model_dump(mode="json", exclude_none=True)
    return yaml.dump(data, Dumper=_ManifestDumper, sort_keys=False, allow_unicode=True)
