"""TFLite variants for LiteRT, converted from a Keras or SavedModel source by TensorFlow's TFLite converter.

- fp32; fp16 (weights stored in float16; the CPU dequantizes them once and computes in float32, GPU
  delegates compute in fp16);
- dynamic_int8: int8 weights without calibration data; activations stay float and are quantized on
  the fly per op; the manifest records int8, as LiteRT's backend does from the int8 weights;
- int8: full-integer with int8 (or uint8) input and output and only int8 builtin ops, calibrated on the
  same samples as the other int8 variants: what the Edge TPU and integer-only accelerators need;
- sparse_fp32 / sparse_int8: weights stored in a sparse encoding (the converter's EXPERIMENTAL_SPARSITY),
  built only for pruned models. LiteRT's XNNPACK delegate cannot prepare sparse int8 weights (their
  DENSIFY ops), so the runtime falls back to the built-in kernels for sparse_int8: it loads and is
  measured like the others, and its note says why its speed column trails tflite/int8. Its file is
  smaller than tflite/int8's only at high sparsity (the indices cost more than the zeros save at half).

Integer weights use the full 8 bits here: XNNPACK and TFLite's built-in kernels widen int8 to 16 bits
before multiplying, so they do not saturate on x86 without VNNI as oneDNN and MLAS can (see
`QuantizationSettings`), and a TFLite int8 variant computes the same integers on every CPU.

LiteRT marks quantization in the converter as deprecated in favour of ai-edge-quantizer; the converter
still produces the same files, and it is the only route that also feeds the Edge TPU compiler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from converters.context import BuildContext, BuiltVariant
from converters.errors import VariantSkippedError
from converters.progress import step
from converters.sources import SourceKind
from edge_runtime.package.manifest import ModelFormat, Precision

MIN_SPARSITY = 0.3  # below this the sparse encoding is larger than the dense one, and nothing runs faster
INT8_IO = ("int8", "uint8")
SPARSE_INT8_KERNELS = (
    "LiteRT's XNNPACK cannot prepare int8 weights stored sparse, so the runtime runs this variant on LiteRT's "
    "built-in kernels (delegate none): slower than tflite/int8 on the CPU (compare their speed); ship it only "
    "where its smaller file matters more"
)

Configure = Callable[[Any], None]


def build_fp32(ctx: BuildContext) -> BuiltVariant:
    return _convert(ctx, "tflite/fp32", Precision.FP32, lambda c: None)


def build_fp16(ctx: BuildContext) -> BuiltVariant:
    import tensorflow as tf

    def configure(converter: Any) -> None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]

    note = "float16 weights: LiteRT's CPU dequantizes them to float32 when it loads the model; GPU delegates run fp16"
    return _convert(ctx, "tflite/fp16", Precision.FP16, configure, (note,))


def build_dynamic_int8(ctx: BuildContext) -> BuiltVariant:
    import tensorflow as tf

    def configure(converter: Any) -> None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]

    note = "dynamic range: int8 weights, float activations quantized per op at run time (no calibration)"
    return _convert(ctx, "tflite/dynamic_int8", Precision.INT8, configure, (note,))


def build_int8(ctx: BuildContext) -> BuiltVariant:
    return _convert(ctx, "tflite/int8", Precision.INT8, full_integer(ctx), (_int8_note(ctx),))


def build_sparse_fp32(ctx: BuildContext) -> BuiltVariant:
    import tensorflow as tf

    sparsity = _require_sparse(ctx)

    def configure(converter: Any) -> None:
        converter.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]

    return _convert(ctx, "tflite/sparse_fp32", Precision.FP32, configure, (_sparse_note(sparsity),))


def build_sparse_int8(ctx: BuildContext) -> BuiltVariant:
    import tensorflow as tf

    sparsity = _require_sparse(ctx)
    quantize = full_integer(ctx)

    def configure(converter: Any) -> None:
        quantize(converter)
        converter.optimizations = [tf.lite.Optimize.DEFAULT, tf.lite.Optimize.EXPERIMENTAL_SPARSITY]

    notes = (_int8_note(ctx), _sparse_note(sparsity), SPARSE_INT8_KERNELS)
    return _convert(ctx, "tflite/sparse_int8", Precision.INT8, configure, notes)


def full_integer(ctx: BuildContext) -> Configure:
    """Full-integer quantization settings, calibrated on the conversion's calibration samples."""
    import tensorflow as tf

    _require_tensorflow_source(ctx)
    if ctx.calibration is None:
        raise VariantSkippedError("full-integer int8 needs calibration data: give --calibration")
    samples = ctx.calibration.samples[: ctx.settings.subset_size]
    io_type = tf.uint8 if ctx.settings.tflite_io == "uint8" else tf.int8

    def representative() -> Iterator[list[Any]]:
        for sample in samples:
            yield list(sample)

    def configure(converter: Any) -> None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = io_type
        converter.inference_output_type = io_type

    return configure


def convert_tflite(ctx: BuildContext, configure: Configure) -> bytes:
    """The source converted by the TFLite converter with the given settings."""
    import tensorflow as tf

    from converters.tensorflow_models import quiet_tensorflow, saved_model_dir

    _require_tensorflow_source(ctx)
    quiet_tensorflow()
    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model_dir(ctx.source)))
    configure(converter)
    return bytes(converter.convert())


def _convert(
    ctx: BuildContext, variant_id: str, precision: Precision, configure: Configure, notes: tuple[str, ...] = ()
) -> BuiltVariant:
    step(f"{variant_id}: converting with the TFLite converter")
    content = convert_tflite(ctx, configure)
    dest = ctx.variant_dir(variant_id) / "model.tflite"
    dest.write_bytes(content)
    return BuiltVariant(ModelFormat.TFLITE, precision, (ctx.relative(dest),), notes)


def _require_tensorflow_source(ctx: BuildContext) -> None:
    if ctx.source.kind.is_tensorflow:
        return
    if ctx.source.kind is SourceKind.TFLITE:
        raise VariantSkippedError(
            "the source is already a TFLite model; TFLite variants are converted from the TensorFlow model it came "
            "from (give the .keras file or SavedModel folder)"
        )
    raise VariantSkippedError(
        f"TFLite variants are converted from TensorFlow models (.keras or SavedModel); this source is "
        f"{ctx.source.kind.value}: use the OpenVINO and ONNX variants"
    )


def _require_sparse(ctx: BuildContext) -> float:
    from converters.tensorflow_models import variable_sparsity

    _require_tensorflow_source(ctx)
    sparsity = variable_sparsity(ctx.source)
    if sparsity < MIN_SPARSITY:
        raise VariantSkippedError(
            f"the model's weights are only {sparsity:.1%} zero (the sparse encoding pays off from "
            f"{MIN_SPARSITY:.0%}); prune it first, e.g. --prune 0.5"
        )
    return sparsity


def _int8_note(ctx: BuildContext) -> str:
    count = min(ctx.settings.subset_size, len(ctx.calibration)) if ctx.calibration is not None else 0
    io = ctx.settings.tflite_io
    return f"full integer: {io} input and output, TFLITE_BUILTINS_INT8 only, calibrated on {count} samples"


def _sparse_note(sparsity: float) -> str:
    return (
        f"weights {sparsity:.1%} zero, stored sparse where the converter finds it pays off; XNNPACK's sparse "
        "kernels take fp32 1x1 convolutions and are off on x86 with AVX, elsewhere the weights are densified at load"
    )
