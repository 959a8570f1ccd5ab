"""Running the reference and each variant through the runtime's own backends, and measuring them.

Everything goes through `edge_runtime.placement.model.load_model`, the path a deployed package takes, so a
variant that passes here loads and runs the same way on a box. The reference is the source model on
its own runtime (ONNX Runtime, LiteRT, OpenVINO), so a conversion error shows up in the fp32 variants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from converters.calibration import Sample, SampleSet
from converters.detection_metrics import Box, DetectionAccuracy, mean_average_precision
from converters.errors import ConversionError
from converters.metrics import RunOutputs
from converters.progress import Warnings, step
from converters.sources import SourceModel
from edge_runtime.backends import backend_for_format
from edge_runtime.backends.base import TensorSpec
from edge_runtime.decoders.decoded import Detections
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.measure.benchmark import (
    LatencyStats,
    ThroughputStats,
    bench_feed,
    measure_latency,
    measure_throughput,
)
from edge_runtime.package.loader import ModelPackage, open_package
from edge_runtime.package.manifest import DecoderSpec, MeasuredOn, ModelFormat
from edge_runtime.placement.model import LoadedModel, load_model

EDGETPU_OPTIONS = {"delegate": "edgetpu", "fallback": []}
_MIN_WEIGHT_SIZE = 16


def describe_reference(source: SourceModel, model: LoadedModel) -> str:
    runs_on = model.backend.runs_on
    return f"{source.path.name} on {runs_on.backend}:{runs_on.device} at {runs_on.precision}"


@dataclass(frozen=True)
class Speed:
    latency: LatencyStats
    throughput: ThroughputStats


def load_reference(source: SourceModel, warnings: Warnings) -> LoadedModel:
    """The source model as the runtime would run the bare file, at its own (fp32) precision on the CPU.

    Where the format's own runtime is missing on this workstation, OpenVINO (which reads every
    supported format) runs it instead, with a warning: the fp32 variants are then compared against
    the same reader that produced them. Keras and SavedModel sources are their own reference, run by
    TensorFlow (converters.tensorflow_models).
    """
    package = open_package(source.path)
    variant_id = next(iter(package.manifest.variants))
    runtime = backend_for_format(package.variant(variant_id).format)
    try:
        return load_model(package, variant_id, runtime)
    except EdgeRuntimeError as error:
        if runtime == "openvino":
            raise
        warnings.add(f"the reference runs on OpenVINO: {runtime} cannot run it ({error})")
        return load_model(package, variant_id, "openvino")


def load_variant(package: ModelPackage, variant_id: str) -> LoadedModel:
    """The variant on this machine's CPU; Edge TPU variants run only on an attached Edge TPU."""
    variant = package.variant(variant_id)
    backend = backend_for_format(variant.format)
    options = EDGETPU_OPTIONS if variant.target == "edgetpu" else {"device": "CPU"}
    return load_model(package, variant_id, backend, options)


def this_machine() -> MeasuredOn:
    """The CPU the figures are measured on, by the features that choose its int8 kernels."""
    from edge_runtime.hardware.cpu import read_cpu

    cpu = read_cpu(Path("/"))
    return MeasuredOn(cpu=cpu.model, int8_features=cpu.int8_features)


def probe_error(package: ModelPackage, model: LoadedModel) -> float | None:
    """The variant's mean output error against the package's fp32 variant on the fidelity probe's inputs.

    The probe's inputs are generated, so a box can measure the same figure again without the
    evaluation data; None where the package has no fp32 variant to compare against.
    """
    from edge_runtime.errors import FidelityError
    from edge_runtime.measure.fidelity import compare, load_reference

    try:
        reference = load_reference(package, model.variant_id)
    except FidelityError:
        return None
    try:
        return compare(model, reference).mean_rel_error
    finally:
        reference.close()


def run_outputs(model: LoadedModel, samples: Sequence[Sample]) -> RunOutputs:
    """Every output over the samples, dequantized to float64, stacked along a new first axis."""
    from edge_runtime.decoders.base import dequantize

    collected: list[list[np.ndarray]] = [[] for _ in model.outputs]
    for sample in samples:
        feed = [as_model_input(array, tensor) for array, tensor in zip(sample, model.inputs, strict=True)]
        for store, output in zip(collected, dequantize(model.infer(feed), model.outputs), strict=True):
            store.append(np.asarray(output, np.float64))
    return RunOutputs([t.name for t in model.outputs], [np.stack(arrays) for arrays in collected])


def detection_accuracy(
    outputs: RunOutputs, eval_set: SampleSet, decoder: DecoderSpec, labels: Sequence[str]
) -> DetectionAccuracy:
    """mAP@0.5 of a model's boxes, decoded per sample as the daemon decodes them: same decoder, source pixels.

    The outputs are decoded in the model's own output order; each sample's transform is the one the
    runtime's preprocessing produced for its image, so letterbox padding or crop is undone as in service.
    """
    from edge_runtime.decoders import make_decoder

    if eval_set.boxes is None:
        raise ConversionError(f"{eval_set.origin} has no annotated boxes to score detections against")
    decode = make_decoder(decoder.name, decoder.params, tuple(labels)).decode
    specs = [
        TensorSpec(name, array.shape[1:], "float32") for name, array in zip(outputs.names, outputs.arrays, strict=True)
    ]
    found: list[list[Box]] = []
    for index, transform in enumerate(eval_set.transforms):
        decoded = decode([array[index].astype(np.float32) for array in outputs.arrays], specs, transform)
        if not isinstance(decoded, Detections):
            raise ConversionError(f"decoder {decoder.name} returns {decoded.task} results, not boxes")
        found.append([Box(d.label, d.box, d.score) for d in decoded.detections])
    return mean_average_precision(eval_set.boxes, found)


def as_model_input(array: np.ndarray, tensor: TensorSpec) -> np.ndarray:
    """A float sample in a model's own input type: quantized with its scale and zero point where it has them."""
    dtype = np.dtype(tensor.dtype)
    if tensor.quantization is not None and np.issubdtype(dtype, np.integer) and array.dtype.kind == "f":
        q = tensor.quantization
        info = np.iinfo(dtype)
        return np.clip(np.rint(array / q.scale + q.zero_point), info.min, info.max).astype(dtype)
    return np.ascontiguousarray(array, dtype=dtype)


def measure_speed(model: LoadedModel, seconds: float, seed: int) -> Speed:
    """Median/p90 latency of single requests, then throughput with the backend's requests in flight."""
    step(f"{model.variant_id}: measuring latency and throughput ({seconds:g} s each)")
    feed = bench_feed(model, seed)
    latency = measure_latency(model, feed, seconds)
    throughput = measure_throughput(model, feed, seconds)
    return Speed(latency, throughput)


def weight_sparsity(model_file: Path, model_format: ModelFormat) -> float:
    """Share of zeros in the weight tensors (constants with two or more dimensions)."""
    if model_format is ModelFormat.TFLITE:
        from converters.tflite_weights import tflite_weight_counts

        total, zeros = tflite_weight_counts(model_file)
        return zeros / total if total else 0.0
    arrays = _openvino_weights(model_file) if model_format is ModelFormat.OPENVINO else _onnx_weights(model_file)
    total = sum(a.size for a in arrays)
    zeros = sum(int(a.size - np.count_nonzero(a)) for a in arrays)
    return zeros / total if total else 0.0


def _is_weight(array: np.ndarray) -> bool:
    return array.ndim >= 2 and array.size >= _MIN_WEIGHT_SIZE and array.dtype.kind in "fiu"


def _openvino_weights(xml: Path) -> list[np.ndarray]:
    import openvino as ov

    weights = []
    for op in ov.Core().read_model(str(xml)).get_ops():
        if op.get_type_name() != "Constant":
            continue
        try:
            data = np.asarray(op.get_data())
        except Exception:  # packed sub-byte constants have no numpy view; they are not counted
            continue
        if _is_weight(data):
            weights.append(data)
    return weights


def _onnx_weights(path: Path) -> list[np.ndarray]:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    arrays = [numpy_helper.to_array(init) for init in model.graph.initializer]
    return [a for a in arrays if _is_weight(a)]
