"""ONNX variants for ONNX Runtime: the fp32 model and a static int8 QDQ model.

int8 is QDQ with signed 8-bit activations and weights, weights per channel: ONNX Runtime's
documentation names S8S8 QDQ the first choice on CPU and the only form its GPU providers take. S8S8
saturates on x86 without VNNI all the same (MLAS shifts the activations to unsigned and multiplies with
VPMADDUBSW), so weights are kept to 7 bits unless asked otherwise: see `QuantizationSettings`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from converters.calibration import Sample
from converters.context import BuildContext, BuiltVariant
from converters.errors import VariantSkippedError
from converters.progress import log, step
from converters.sources import first_line
from edge_runtime.package.manifest import ModelFormat, Precision


def build_fp32(ctx: BuildContext) -> BuiltVariant:
    source = ctx.source.onnx_file()
    step("onnx/fp32: writing the fp32 model")
    dest = ctx.variant_dir("onnx/fp32") / "model.onnx"
    if _has_external_data(source):
        import onnx

        onnx.save(onnx.load(str(source)), str(dest))
    else:
        shutil.copyfile(source, dest)
    return BuiltVariant(ModelFormat.ONNX, Precision.FP32, (ctx.relative(dest),))


def build_int8(ctx: BuildContext) -> BuiltVariant:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    source = ctx.source.onnx_file()
    if ctx.calibration is None:
        raise VariantSkippedError("int8 needs calibration data: give --calibration")
    dest = ctx.variant_dir("onnx/int8") / "model.onnx"
    notes = [
        f"ONNX Runtime static quantization, QDQ S8S8 per channel, MinMax on {len(ctx.calibration)} samples",
        ctx.settings.weight_range_note(),
    ]
    with tempfile.TemporaryDirectory(prefix="edge-convert-") as scratch:
        prepared = _pre_process(source, Path(scratch) / "prepared.onnx", notes)
        names = _input_names(prepared)
        excluded = [name for name in _node_names(prepared) if ctx.settings.ignores(name)]
        if excluded:
            notes.append(f"kept in float: {len(excluded)} nodes matching " + ", ".join(ctx.settings.ignored_scope))
        step(f"onnx/int8: calibrating on {len(ctx.calibration)} samples and quantizing")
        quantize_static(
            str(prepared),
            str(dest),
            _reader(names, ctx.calibration.samples),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=not ctx.settings.full_range_weights,
            calibrate_method=CalibrationMethod.MinMax,
            nodes_to_exclude=excluded or None,
        )
    return BuiltVariant(ModelFormat.ONNX, Precision.INT8, (ctx.relative(dest),), tuple(notes))


def _pre_process(source: Path, prepared: Path, notes: list[str]) -> Path:
    """Shape inference and graph cleanup that quantization works best on; the original model if it fails.

    Symbolic shape inference fails on some graphs where plain ONNX shape inference works, so that is
    tried second.
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process

    problems = []
    for skip_symbolic in (False, True):
        try:
            quant_pre_process(str(source), str(prepared), skip_symbolic_shape=skip_symbolic)
            return prepared
        except Exception as error:
            problems.append(first_line(error))
    message = f"quant_pre_process failed ({problems[-1]}); quantized the model as it is"
    log.warning("onnx/int8: %s", message)
    notes.append(message)
    return source


def _reader(names: Sequence[str], samples: Sequence[Sample]) -> Any:
    from onnxruntime.quantization import CalibrationDataReader

    class SampleReader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._items = iter(samples)

        def get_next(self) -> dict[str, Any] | None:
            sample = next(self._items, None)
            return None if sample is None else dict(zip(names, sample, strict=True))

    return SampleReader()


def _load_graph(path: Path) -> Any:
    import onnx

    return onnx.load(str(path), load_external_data=False).graph


def _input_names(path: Path) -> list[str]:
    graph = _load_graph(path)
    initializers = {init.name for init in graph.initializer}
    return [value.name for value in graph.input if value.name not in initializers]


def _node_names(path: Path) -> list[str]:
    return [node.name for node in _load_graph(path).node if node.name]


def _has_external_data(path: Path) -> bool:
    import onnx

    graph = _load_graph(path)
    return any(init.data_location == onnx.TensorProto.EXTERNAL for init in graph.initializer)
