"""int8 QDQ models for the numerics tests, and the ONNX reference implementation they are held to.

The reference (`onnx.reference`) computes each QDQ graph as the ONNX specification defines it, in
numpy: the integers every correct CPU kernel must produce, whatever its instruction set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_images(rng: np.random.Generator, count: int) -> np.ndarray:
    """Inputs for the tiny classifier whose channels differ in brightness, so its outputs differ between them."""
    return (rng.normal(0, 2, (count, 1, 3, 1, 1)) + rng.normal(0, 0.5, (count, 1, 3, 32, 32))).astype(np.float32)


def quantize_qdq(source: Path, dest: Path, calibration: Iterable[np.ndarray], *, reduce_range: bool = True) -> Path:
    """ONNX Runtime's static quantizer as edge-convert calls it: QDQ S8S8, weights per channel, 7-bit by default."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    name = onnx.load(source).graph.input[0].name
    samples = iter({name: sample} for sample in calibration)

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(samples, None)

    quantize_static(
        source,
        dest,
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        per_channel=True,
        reduce_range=reduce_range,
    )
    return dest


def reference_runner(path: Path) -> Callable[[np.ndarray], np.ndarray]:
    """The graph's first output computed by the ONNX reference implementation.

    The reference implements QuantizeLinear and DequantizeLinear from opset 19 on; their meaning for
    the per-tensor and per-axis int8 used here is the same in every opset since 13, so the graph is
    run under 19.
    """
    from onnx.reference import ReferenceEvaluator

    model = onnx.load(path)
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = max(opset.version, 19)
    evaluator = ReferenceEvaluator(model)
    name = model.graph.input[0].name
    return lambda x: np.asarray(evaluator.run(None, {name: x})[0])


def scale_of(path: Path, tensor: str) -> float:
    """The quantization scale the quantizer chose for `tensor` (its initializer `<tensor>_scale`)."""
    wanted = f"{tensor}_scale"
    for init in onnx.load(path).graph.initializer:
        if init.name == wanted:
            return float(numpy_helper.to_array(init))
    raise KeyError(f"{path} has no initializer {wanted}")


def weight_range(path: Path) -> tuple[int, int]:
    """The smallest and largest quantized weight of an int8 QDQ model."""
    arrays = [numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer]
    weights = np.concatenate([a.ravel().astype(np.int32) for a in arrays if a.dtype == np.int8 and a.size > 1])
    return int(weights.min()), int(weights.max())


def saturating_conv_qdq(weight: int, channels: int = 64) -> tuple[bytes, np.ndarray, np.ndarray]:
    """A 3x3 convolution over `channels` inputs whose int8 products saturate a 16-bit pair sum where `weight` > 64.

    The input quantizes to 255 (uint8), the weights to +-`weight` in four channel patterns: all positive,
    all negative, alternating (which cancels to 0) and positive again. Returns the model, an input that
    quantizes to the full range, and the exact result in steps of the output scale (which keeps it at
    +-100 so that requantization does not clip it).
    """
    weights = np.full((4, channels, 3, 3), weight, np.int8)
    weights[1] = -weight
    weights[2, ::2] = -weight
    exact = 255 * weights.astype(np.int64).sum(axis=(1, 2, 3))
    output_scale = float(np.abs(exact).max()) / 100
    initializers = [
        numpy_helper.from_array(weights, "w_q"),
        numpy_helper.from_array(np.ones(4, np.float32), "w_scale"),
        numpy_helper.from_array(np.zeros(4, np.int8), "w_zero"),
        numpy_helper.from_array(np.array(1.0, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(0, np.uint8), "x_zero"),
        numpy_helper.from_array(np.array(output_scale, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "y_zero"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_dq"], axis=0),
        helper.make_node("Conv", ["x_dq", "w_dq"], ["conv"]),
        helper.make_node("QuantizeLinear", ["conv", "y_scale", "y_zero"], ["y_q"]),
        helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zero"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "saturating_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    x = np.full((1, channels, 3, 3), 255.0, np.float32)
    return model.SerializeToString(), x, np.rint(exact / output_scale)
