"""The variants the converter can build, by id; a new format adds its builders here."""

from __future__ import annotations

from converters import edgetpu, onnx_variants, openvino_variants, tflite_variants
from converters.context import Builder
from converters.errors import ConversionError
from converters.sources import SourceKind

BUILDERS: dict[str, Builder] = {
    "openvino/fp32": openvino_variants.build_fp32,
    "openvino/fp16": openvino_variants.build_fp16,
    "openvino/int8": openvino_variants.build_int8,
    "onnx/fp32": onnx_variants.build_fp32,
    "onnx/int8": onnx_variants.build_int8,
    "tflite/fp32": tflite_variants.build_fp32,
    "tflite/fp16": tflite_variants.build_fp16,
    "tflite/dynamic_int8": tflite_variants.build_dynamic_int8,
    "tflite/int8": tflite_variants.build_int8,
    "tflite/sparse_fp32": tflite_variants.build_sparse_fp32,
    "tflite/sparse_int8": tflite_variants.build_sparse_int8,
    "tflite/edgetpu": edgetpu.build_edgetpu,
}
# ONNX, OpenVINO IR and TFLite sources: the TFLite converter needs the TensorFlow model.
DEFAULT_VARIANTS = ("openvino/fp32", "openvino/fp16", "openvino/int8", "onnx/fp32", "onnx/int8")
TENSORFLOW_VARIANTS = tuple(BUILDERS)


def default_variants(kind: SourceKind) -> tuple[str, ...]:
    """What `--variants` means when not given: every variant the source's format can be turned into."""
    return TENSORFLOW_VARIANTS if kind.is_tensorflow else DEFAULT_VARIANTS


def quick_variants(variant_ids: tuple[str, ...]) -> tuple[str, ...]:
    """A first look (`--quick`): of the variants asked for, each format's fp32 and its full-integer int8."""
    return tuple(vid for vid in variant_ids if vid.split("/")[1] in ("fp32", "int8"))


def check_variant_ids(variant_ids: tuple[str, ...]) -> tuple[str, ...]:
    """The ids in order without repeats; an unknown id is an error that lists the known ones."""
    unknown = [vid for vid in variant_ids if vid not in BUILDERS]
    if unknown:
        raise ConversionError(f"unknown variant {unknown[0]!r}; the converter builds {', '.join(BUILDERS)}")
    if not variant_ids:
        raise ConversionError("--variants is empty; name at least one of " + ", ".join(BUILDERS))
    return tuple(dict.fromkeys(variant_ids))
