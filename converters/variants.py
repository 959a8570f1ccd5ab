"""The variants the converter can build, by id; a new format adds its builders here."""

from __future__ import annotations

from converters import onnx_variants, openvino_variants
from converters.context import Builder
from converters.errors import ConversionError

BUILDERS: dict[str, Builder] = {
    "openvino/fp32": openvino_variants.build_fp32,
    "openvino/fp16": openvino_variants.build_fp16,
    "openvino/int8": openvino_variants.build_int8,
    "onnx/fp32": onnx_variants.build_fp32,
    "onnx/int8": onnx_variants.build_int8,
}
DEFAULT_VARIANTS = tuple(BUILDERS)
RUNS_ON = {"openvino": "openvino", "onnx": "onnxruntime", "tflite": "litert"}


def check_variant_ids(variant_ids: tuple[str, ...]) -> tuple[str, ...]:
    """The ids in order without repeats; an unknown id is an error that lists the known ones."""
    unknown = [vid for vid in variant_ids if vid not in BUILDERS]
    if unknown:
        raise ConversionError(f"unknown variant {unknown[0]!r}; the converter builds {', '.join(BUILDERS)}")
    if not variant_ids:
        raise ConversionError("--variants is empty; name at least one of " + ", ".join(BUILDERS))
    return tuple(dict.fromkeys(variant_ids))
