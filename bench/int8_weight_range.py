"""int8 weights kept to 7 bits against full-range 8-bit weights: what the converter's default costs and buys.

edge-convert keeps the int8 weights of OpenVINO and ONNX variants within 7 bits (NNCF's overflow fix on
every layer, ONNX Runtime's `reduce_range`), because x86 CPUs without VNNI or AMX add pairs of int8
products in 16 bits and saturate on 8-bit weights (see `converters.context.QuantizationSettings`).
Each model below is converted twice by `converters.pipeline.convert`, with the default and with
`QuantizationSettings(full_range_weights=True)`, and both are measured in the same run:

- digits: a small CNN trained with Keras on 1,200 of scikit-learn's 8×8 digits, as the converter's own
  tests train it but wider, converted to openvino/fp32, openvino/int8, onnx/fp32 and onnx/int8 with the
  training digits as calibration and the 597 held-out digits as validation. Reported: top-1 of each int8
  variant on the held-out digits, its drop against the fp32 variant of its format, the mean absolute
  error of its class probabilities against that fp32 variant, and the manifest's `probe_error`.
  `max_drop` is 1.0, so NNCF's accuracy control keeps every layer in int8 and the two conversions differ
  in the weight range alone. The package declares its input as 0–255 pixels scaled by 1/255, the 0–1 the
  network was trained on, so that the fidelity probe's generated frames reach it in range.
- face: MediaPipe's BlazeFace short-range detector bundled in samples/models/face_detection_short_range,
  OpenVINO variants converted from its TFLite file, ONNX variants from tf2onnx's export of that file;
  calibrated on 300 crops of scikit-image's sample photos and compared with the fp32 variant of the same
  format on 100 other crops and the 60 frames of samples/videos/astronaut.mp4: cosine and mean absolute
  error per output, and mAP@0.5 of the int8 variant's faces with the fp32 variant's faces as the truth.
- Both accuracy parts also run every int8 variant as its file specifies it: OpenVINO without its
  low-precision transformations (the CPU plugin's LP_TRANSFORMS_MODE off, so FakeQuantize runs in f32 and
  no integer kernel is used), ONNX Runtime without graph optimizations (QuantizeLinear, DequantizeLinear
  and float operators, node by node). What this CPU's integer kernels compute differs from that only by
  rounding unless they saturate, so saturation shows apart from what quantization itself costs.
- speed: MobileNetV2 from quantized_package.py (seeded random weights, photo calibration), converted to
  openvino/int8 and onnx/int8 at both weight ranges, each run through the runtime's own backends and
  `edge_runtime.measure.benchmark` as quantized_speed.py does: synchronous latency under the latency hint,
  asynchronous throughput under the throughput hint. The four sides alternate within every round, in
  reversed order every other round, so that drift of a shared machine affects both weight ranges alike;
  medians over the rounds and the 7-bit/8-bit ratio of every round are reported, with the kernels each
  side compiled to (OpenVINO's compiled graph, ONNX Runtime's optimized graph).

    python bench/int8_weight_range.py [--parts digits face speed] [--rounds 5] [--seconds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import yaml

from converters.calibration import Sample
from converters.context import QuantizationSettings
from converters.describe import InputFlags
from converters.detection_metrics import Box, mean_average_precision
from converters.evaluate import load_variant, run_outputs
from converters.metrics import Agreement, RunOutputs, agreement
from converters.pipeline import ConvertOptions, convert
from converters.report import ConversionReport, VariantResult
from edge_runtime.backends.base import TensorSpec
from edge_runtime.backends.host import cpu_name
from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.decoded import Detections
from edge_runtime.hardware.cpu import read_cpu
from edge_runtime.package.loader import ModelPackage, open_package
from edge_runtime.pipeline.preprocess import FrameTransform, ImagePreprocessor
from edge_runtime.placement.model import LoadedModel, load_model

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from models import ASTRONAUT_CLIP, FACE_PACKAGE  # noqa: E402
from quantized_package import calibration_photos, converted_package, describe_calibration, version  # noqa: E402
from quantized_speed import fmt, measured, median, openvino_layers  # noqa: E402

RESULTS = BENCH / "results" / "int8_weight_range.json"
WEIGHT_RANGES = {"7-bit": False, "8-bit": True}  # label: QuantizationSettings.full_range_weights
INT8_VARIANTS = ("openvino/int8", "onnx/int8")
RUNS_ON = {"openvino": "openvino", "onnx": "onnxruntime"}
BACKEND_NAMES = {"openvino": "OpenVINO CPU", "onnxruntime": "ONNX Runtime CPU"}
SPEED_VARIANTS = ("openvino/fp32", "openvino/int8", "onnx/fp32", "onnx/int8")
DIGIT_LABELS = ",".join(str(digit) for digit in range(10))
DIGITS_TRAIN = 1200
FACE_CALIBRATION = 300
FACE_HELD_OUT = 100
REPORTED_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
FACE_MODEL = FACE_PACKAGE / "tflite" / "fp32" / "model.tflite"
# An eighth of the face detector's input step (2/255): how far its int8 outputs move when roundings flip.
INPUT_NUDGE = 0.001
# The CPU plugin's switch for its low-precision transformations; without them an int8 IR runs as written.
AS_SPECIFIED_OPTIONS: dict[str, dict[str, Any]] = {
    "openvino": {"device": "CPU", "precision": "fp32", "extra_properties": {"LP_TRANSFORMS_MODE": "NO"}},
    "onnxruntime": {"device": "CPU", "graph_optimization_level": "disabled"},
}


def fp32_of(variant: str) -> str:
    return variant.replace("/int8", "/fp32")


def backend_of(variant: str) -> str:
    return RUNS_ON[variant.split("/")[0]]


# --- what the int8 files hold and compute ------------------------------------------------------------------


def weight_values(package: ModelPackage, variant: str) -> str:
    """The range of the integer weights the file holds: overall for ONNX, per layer type for OpenVINO.

    NNCF's overflow fix leaves depthwise convolutions (GroupConvolution) at 8 bits, so the table shows them
    apart. Their kernels add no 16-bit pairs: a 3×3 depthwise layer with weights of 127 on inputs of 255
    computes exactly on AVX2 without VNNI, in OpenVINO and ONNX Runtime alike.
    """
    path = package.source(variant).path
    if variant.startswith("onnx"):
        import onnx
        from onnx import numpy_helper

        arrays = [numpy_helper.to_array(init) for init in onnx.load(str(path)).graph.initializer]
        weights = np.concatenate([a.ravel().astype(np.int32) for a in arrays if a.dtype == np.int8 and a.size > 1])
        return f"{weights.min()}…{weights.max()}"
    import openvino as ov

    ranges: dict[str, tuple[int, int]] = {}
    for op in ov.Core().read_model(str(path)).get_ordered_ops():
        if op.get_type_name() not in ("Convolution", "GroupConvolution", "MatMul"):
            continue
        weight = op.input_value(1).get_node()
        while weight.get_type_name() != "Constant" and weight.get_input_size() > 0:
            weight = weight.input_value(0).get_node()
        values = weight.get_data() if weight.get_type_name() == "Constant" else None
        if values is None or values.dtype != np.int8:
            continue
        low, high = ranges.get(op.get_type_name(), (0, 0))
        ranges[op.get_type_name()] = (min(low, int(values.min())), max(high, int(values.max())))
    return ", ".join(f"{layer} {low}…{high}" for layer, (low, high) in ranges.items()) or "no int8 weights"


def as_specified(package: ModelPackage, variant: str) -> LoadedModel:
    """The int8 variant computed as its graph defines it, in float with fake quantization, on this CPU."""
    backend = backend_of(variant)
    return load_model(package, variant, backend, AS_SPECIFIED_OPTIONS[backend])


def outputs_of(model: LoadedModel, samples: Sequence[Sample]) -> RunOutputs:
    try:
        return run_outputs(model, samples)
    finally:
        model.close()


def converted(options: ConvertOptions) -> tuple[ConversionReport, ModelPackage]:
    """The conversion, stopped when a variant asked for was not built: a missing row would read as a result."""
    report = convert(options)
    failed = [f"{r.variant_id}: {r.status} ({r.message})" for r in report.variants if r.status != "ok"]
    if failed:
        raise SystemExit(f"the conversion into {options.out_dir} did not build " + "; ".join(failed))
    return report, open_package(options.out_dir)


def probe_error(package: ModelPackage, variant: str) -> float | None:
    return package.manifest.variants[variant].accuracy.get("probe_error")


# --- digits: top-1 on held-out real data -------------------------------------------------------------------


@dataclass(frozen=True)
class DigitsData:
    model: Path
    calibration: Path
    validation: Path
    samples: list[Sample]
    labels: np.ndarray


@dataclass
class DigitsRow:
    variant: str
    weights: str
    weight_values: str
    top1: float
    fp32_top1: float
    probe_error: float | None
    mean_error: float  # mean |int8 - fp32| over all class probabilities, this CPU
    specified_mean_error: float  # the same for the int8 file computed as specified
    specified_top1: float
    off_specification: float  # largest |this CPU - specified| over all class probabilities
    class_changes: int  # held-out digits whose class differs between this CPU and the specification

    @property
    def drop_points(self) -> float:
        return 100 * (self.fp32_top1 - self.top1)


def digits_data(folder: Path, seed: int) -> DigitsData:
    """The converter tests' digits recipe with twice the filters and units: 1,200 to train, the rest held out."""
    from sklearn.datasets import load_digits
    from tensorflow import keras

    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[..., None]
    y = data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    train, held = order[:DIGITS_TRAIN], order[DIGITS_TRAIN:]
    np.savez(folder / "validation.npz", x=x[held], y=y[held])
    np.save(folder / "calibration.npy", x[train])
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(keras.optimizers.Adam(3e-3), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x[train], y[train], epochs=15, batch_size=32, verbose=0)
    model.save(folder / "digits.keras")
    samples = [[x[index : index + 1]] for index in held]
    return DigitsData(folder / "digits.keras", folder / "calibration.npy", folder / "validation.npz", samples, y[held])


def digits_part(work: Path, seed: int) -> tuple[list[DigitsRow], int]:
    print("digits: training the CNN", file=sys.stderr)
    data = digits_data(work, seed)
    rows = []
    for weights, full_range in WEIGHT_RANGES.items():
        print(f"digits: converting with {weights} weights", file=sys.stderr)
        options = ConvertOptions(
            model=data.model,
            out_dir=work / f"digits-{weights}",
            labels=DIGIT_LABELS,
            calibration=data.calibration,
            validation=data.validation,
            input_flags=InputFlags(mean=(0.0,), std=(255.0,)),
            settings=QuantizationSettings(full_range_weights=full_range, max_drop=1.0, seed=seed),
            variants=("openvino/fp32", "openvino/int8", "onnx/fp32", "onnx/int8"),
            bench_seconds=0,
        )
        report, package = converted(options)
        results = {r.variant_id: r for r in report.variants}
        for variant in INT8_VARIANTS:
            fp32 = outputs_of(load_variant(package, fp32_of(variant)), data.samples)
            on_cpu = outputs_of(load_variant(package, variant), data.samples)
            specified = outputs_of(as_specified(package, variant), data.samples)
            against_specification = agreement(specified, on_cpu, classification=True)
            rows.append(
                DigitsRow(
                    variant=variant,
                    weights=weights,
                    weight_values=weight_values(package, variant),
                    top1=top1(results[variant]),
                    fp32_top1=top1(results[fp32_of(variant)]),
                    probe_error=probe_error(package, variant),
                    mean_error=agreement(fp32, on_cpu, classification=True).mean_abs_error,
                    specified_mean_error=agreement(fp32, specified, classification=True).mean_abs_error,
                    specified_top1=float((np.argmax(specified.scores(), axis=1) == data.labels).mean()),
                    off_specification=against_specification.max_abs_error,
                    class_changes=round((1 - (against_specification.top1_agreement or 0.0)) * len(data.samples)),
                )
            )
    return rows, len(data.samples)


def top1(result: VariantResult) -> float:
    if result.accuracy is None:
        raise SystemExit(f"{result.variant_id} has no top-1: the validation set was not labelled")
    return result.accuracy.top1


# --- face: agreement of a real detector with its fp32 variant -----------------------------------------------


@dataclass(frozen=True)
class OutputFigures:
    name: str
    cosine: float  # against the fp32 variant of the same format
    mean_abs_error: float
    specified_cosine: float  # the same int8 file computed as specified, against the fp32 variant
    specified_mean_abs_error: float
    off_specification_max: float  # this CPU against the same int8 file computed as specified
    off_specification_mean: float
    rounding_floor_mean: float  # as specified, against itself on inputs nudged by a fraction of a step


@dataclass
class FaceRow:
    variant: str
    weights: str
    weight_values: str
    probe_error: float | None
    outputs: list[OutputFigures]
    faces_map50: float  # mAP@0.5 of the int8 faces with the fp32 variant's faces as the truth
    specified_faces_map50: float
    fp32_faces: int


@dataclass(frozen=True)
class FaceImages:
    calibration: Path
    evaluation: list[np.ndarray]  # BGR frames
    origin: str


def face_images(work: Path, seed: int) -> FaceImages:
    """Calibration crops of the sample photos; other crops and every frame of the astronaut clip to compare on."""
    calibration = calibration_photos(work / "face-calibration", seed, FACE_CALIBRATION, 256)
    held_out = calibration_photos(work / "face-held-out", seed + 1, FACE_HELD_OUT, 256)
    frames = [read_image(path) for path in sorted(held_out.iterdir())]
    capture = cv2.VideoCapture(str(ASTRONAUT_CLIP), cv2.CAP_FFMPEG)
    clip = 0
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(np.ascontiguousarray(frame))
        clip += 1
    capture.release()
    if clip == 0:
        raise SystemExit(f"cannot decode {ASTRONAUT_CLIP}")
    origin = (
        f"{FACE_HELD_OUT} other crops of the same photos (seed {seed + 1}) and the {clip} frames of "
        f"{ASTRONAUT_CLIP.relative_to(BENCH.parent)}"
    )
    return FaceImages(calibration, frames, origin)


def read_image(path: Path) -> np.ndarray:
    image = cv2.imread(str(path))
    if image is None:
        raise SystemExit(f"cannot read {path}")
    return np.asarray(image)


def onnx_export(tflite: Path, dest: Path) -> Path:
    """tf2onnx's export of the TFLite file; the converter builds no ONNX variant from TFLite by itself."""
    command = [sys.executable, "-m", "tf2onnx.convert", "--tflite", str(tflite), "--output", str(dest)]
    subprocess.run([*command, "--opset", "17"], check=True, capture_output=True)
    return dest


def face_options(
    model: Path, out_dir: Path, calibration: Path, variants: tuple[str, ...], full: bool
) -> ConvertOptions:
    manifest = yaml.safe_load((FACE_PACKAGE / "model.yaml").read_text(encoding="utf-8"))
    return ConvertOptions(
        model=model,
        out_dir=out_dir,
        name="face_detection_short_range",
        task="detection",
        labels="face",
        input_flags=InputFlags(color_order="RGB", mean=(127.5,), std=(127.5,), resize="letterbox"),
        decoder="ssd_anchors",
        decoder_params=json.dumps(manifest["decoder"]["params"]),
        calibration=calibration,
        settings=QuantizationSettings(full_range_weights=full),
        variants=variants,
        bench_seconds=0,
    )


def face_samples(package: ModelPackage, frames: Sequence[np.ndarray]) -> tuple[list[Sample], list[FrameTransform]]:
    """The frames preprocessed as the daemon does (letterbox to 128×128, RGB, [-1, 1])."""
    spec = package.manifest.inputs[0]
    preprocess = ImagePreprocessor(spec, TensorSpec("input", spec.shape, "float32"))
    samples, transforms = [], []
    for frame in frames:
        tensor, transform = preprocess(frame)
        samples.append([tensor])
        transforms.append(transform)
    return samples, transforms


def faces(package: ModelPackage, outputs: RunOutputs, transforms: Sequence[FrameTransform]) -> list[list[Box]]:
    """Every frame's faces as the manifest's decoder finds them, in frame pixels."""
    decoder_spec = package.manifest.decoder
    if decoder_spec is None:
        raise SystemExit("the face package has no decoder")
    decode = make_decoder(decoder_spec.name, decoder_spec.params, tuple(package.manifest.labels)).decode
    specs = [TensorSpec(name, a.shape[1:], "float32") for name, a in zip(outputs.names, outputs.arrays, strict=True)]
    found = []
    for index, transform in enumerate(transforms):
        decoded = decode([a[index].astype(np.float32) for a in outputs.arrays], specs, transform)
        if not isinstance(decoded, Detections):
            raise SystemExit(f"the decoder {decoder_spec.name} returns {decoded.task}, not boxes")
        found.append([Box(d.label, d.box, d.score) for d in decoded.detections])
    return found


@dataclass(frozen=True)
class FaceRuns:
    """One int8 variant's outputs on the comparison images, and those it is compared with."""

    fp32: RunOutputs
    on_cpu: RunOutputs
    specified: RunOutputs
    specified_nudged: RunOutputs  # as specified, on inputs with noise of σ INPUT_NUDGE added


def face_part(work: Path, seed: int) -> tuple[list[FaceRow], str]:
    images = face_images(work, seed)
    onnx_model = onnx_export(FACE_MODEL, work / "face_detection_short_range.onnx")
    rows = []
    for weights, full_range in WEIGHT_RANGES.items():
        for source, fmt_name in ((FACE_MODEL, "openvino"), (onnx_model, "onnx")):
            variant = f"{fmt_name}/int8"
            print(f"face: converting {source.name} to {variant} with {weights} weights", file=sys.stderr)
            out_dir = work / f"face-{fmt_name}-{weights}"
            _, package = converted(
                face_options(source, out_dir, images.calibration, (fp32_of(variant), variant), full_range)
            )
            samples, transforms = face_samples(package, images.evaluation)
            noise = np.random.default_rng(seed)
            nudged = [
                [sample[0] + noise.normal(0, INPUT_NUDGE, sample[0].shape).astype(np.float32)] for sample in samples
            ]
            runs = FaceRuns(
                fp32=outputs_of(load_variant(package, fp32_of(variant)), samples),
                on_cpu=outputs_of(load_variant(package, variant), samples),
                specified=outputs_of(as_specified(package, variant), samples),
                specified_nudged=outputs_of(as_specified(package, variant), nudged),
            )
            rows.append(face_row(package, variant, weights, runs, transforms))
    return rows, images.origin


def face_row(
    package: ModelPackage, variant: str, weights: str, runs: FaceRuns, transforms: Sequence[FrameTransform]
) -> FaceRow:
    against_fp32: Agreement = agreement(runs.fp32, runs.on_cpu, classification=False)
    specified_against_fp32 = agreement(runs.fp32, runs.specified, classification=False)
    against_specification = agreement(runs.specified, runs.on_cpu, classification=False)
    rounding_floor = agreement(runs.specified, runs.specified_nudged, classification=False)
    fp32_faces = faces(package, runs.fp32, transforms)
    outputs = [
        OutputFigures(
            mine.name,
            mine.cosine,
            mine.mean_abs_error,
            as_written.cosine,
            as_written.mean_abs_error,
            off.max_abs_error,
            off.mean_abs_error,
            floor.mean_abs_error,
        )
        for mine, as_written, off, floor in zip(
            against_fp32.outputs,
            specified_against_fp32.outputs,
            against_specification.outputs,
            rounding_floor.outputs,
            strict=True,
        )
    ]
    return FaceRow(
        variant=variant,
        weights=weights,
        weight_values=weight_values(package, variant),
        probe_error=probe_error(package, variant),
        outputs=outputs,
        faces_map50=mean_average_precision(fp32_faces, faces(package, runs.on_cpu, transforms)).map50,
        specified_faces_map50=mean_average_precision(fp32_faces, faces(package, runs.specified, transforms)).map50,
        fp32_faces=sum(len(found) for found in fp32_faces),
    )


# --- speed: MobileNetV2 at both weight ranges ---------------------------------------------------------------


@dataclass(frozen=True)
class SpeedSide:
    variant: str
    weights: str
    package: Path

    @property
    def backend(self) -> str:
        return backend_of(self.variant)


@dataclass
class SpeedSeries:
    side: SpeedSide
    latency_ms: list[float] = field(default_factory=list)
    throughput_fps: list[float] = field(default_factory=list)
    runs_at: str = ""


def measure_side(side: SpeedSide, hint: str, seconds: float) -> tuple[float, str]:
    """Median latency (ms) or throughput (FPS) through the runtime, and the precision it reports running at."""
    options: dict[str, Any] = {"device": "CPU", "hint": hint}
    if side.backend == "openvino":
        options["precision"] = "int8"  # float ops at f32, as quantized_speed.py runs its int8 variant
    return measured(side.package, side.variant, side.backend, options, hint, seconds)


def measure_speed(sides: list[SpeedSide], rounds: int, seconds: float) -> list[SpeedSeries]:
    series = [SpeedSeries(side) for side in sides]
    for round_index in range(rounds):
        order = series if round_index % 2 == 0 else series[::-1]
        for hint in ("latency", "throughput"):
            for item in order:
                side = item.side
                print(f"round {round_index + 1}/{rounds}: {side.variant} {side.weights} {hint}", file=sys.stderr)
                value, item.runs_at = measure_side(side, hint, seconds)
                (item.latency_ms if hint == "latency" else item.throughput_fps).append(value)
    return series


def onnxruntime_graph(model_file: Path) -> str:
    """Operators of the graph ONNX Runtime runs after its optimizations, by domain and type."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="int8-weight-range-") as scratch:
        optimized = Path(scratch) / "optimized.onnx"
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(optimized)
        options.log_severity_level = 3  # its warning: the optimized graph suits this CPU only, all it is used for
        ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
        nodes = onnx.load(str(optimized)).graph.node
    counts = Counter(f"{node.domain + '.' if node.domain else ''}{node.op_type}" for node in nodes)
    return ", ".join(f"{count} {name}" for name, count in sorted(counts.items()))


def kernels(side: SpeedSide) -> str:
    model_file = open_package(side.package).source(side.variant).path
    return openvino_layers(model_file) if side.backend == "openvino" else onnxruntime_graph(model_file)


def ratios(series: list[SpeedSeries]) -> list[dict[str, Any]]:
    """Per backend: 7-bit over 8-bit, per round and as the ratio of the medians (latency: below 1 is faster)."""
    rows = []
    for backend in BACKEND_NAMES:
        pair = {s.side.weights: s for s in series if s.side.backend == backend}
        if set(pair) != set(WEIGHT_RANGES):
            continue
        seven, eight = pair["7-bit"], pair["8-bit"]
        rows.append(
            {
                "backend": BACKEND_NAMES[backend],
                "latency_per_round": [a / b for a, b in zip(seven.latency_ms, eight.latency_ms, strict=True)],
                "throughput_per_round": [
                    a / b for a, b in zip(seven.throughput_fps, eight.throughput_fps, strict=True)
                ],
                "latency": ratio(median(seven.latency_ms), median(eight.latency_ms)),
                "throughput": ratio(median(seven.throughput_fps), median(eight.throughput_fps)),
            }
        )
    return rows


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def speed_part(args: argparse.Namespace) -> tuple[list[SpeedSeries], dict[str, str], list[dict[str, Any]]]:
    packages = {
        weights: converted_package(args.seed, "photos", args.reconvert, SPEED_VARIANTS, full_range)
        for weights, full_range in WEIGHT_RANGES.items()
    }
    sides = [SpeedSide(variant, weights, packages[weights]) for variant in INT8_VARIANTS for weights in WEIGHT_RANGES]
    series = measure_speed(sides, args.rounds, args.seconds)
    compiled = {f"{side.variant} {side.weights}": kernels(side) for side in sides}
    weights = {
        f"{side.variant} {side.weights}": weight_values(open_package(side.package), side.variant) for side in sides
    }
    return series, compiled | {f"{key} weights": value for key, value in weights.items()}, ratios(series)


# --- the report ---------------------------------------------------------------------------------------------


def percent(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}%"


def digits_table(rows: list[DigitsRow], held_out: int) -> list[str]:
    lines = [
        f"**digits** (top-1 on {held_out} held-out digits)",
        "",
        "| variant | weights | int8 weights in the file | top-1 | fp32 top-1 | drop, points | probe_error "
        "| mean \\|int8 − fp32\\| | as specified: top-1 | as specified: mean \\|int8 − fp32\\| "
        "| max \\|this CPU − specified\\| | classes changed by this CPU |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.variant} | {row.weights} | {row.weight_values} | {percent(row.top1)} | {percent(row.fp32_top1)} "
            f"| {row.drop_points:+.2f} | {percent(row.probe_error, 3)} | {row.mean_error:.5f} "
            f"| {percent(row.specified_top1)} | {row.specified_mean_error:.5f} | {row.off_specification:.4f} "
            f"| {row.class_changes} |"
        )
    return lines


def face_table(rows: list[FaceRow], origin: str) -> list[str]:
    names = [output.name for output in rows[0].outputs] if rows else []
    lines = [
        f"**face_detection_short_range** against the fp32 variant of the same format, on {origin}; "
        "per output: cosine / mean absolute error",
        "",
        "| variant | weights | int8 weights in the file | probe_error "
        + "".join(f"| {name} | as specified: {name} " for name in names)
        + "| fp32 faces | faces mAP@0.5 vs fp32 | as specified: faces mAP@0.5 vs fp32 |",
        "|---|---|---|---:|" + "---:|---:|" * len(names) + "---:|---:|---:|",
    ]
    for row in rows:
        cells = "".join(
            f" {o.cosine:.4f} / {o.mean_abs_error:.3f} | {o.specified_cosine:.4f} / {o.specified_mean_abs_error:.3f} |"
            for o in row.outputs
        )
        lines.append(
            f"| {row.variant} | {row.weights} | {row.weight_values} | {percent(row.probe_error, 3)} |{cells}"
            f" {row.fp32_faces} | {fmt(row.faces_map50, 3)} | {fmt(row.specified_faces_map50, 3)} |"
        )
    lines += [
        "",
        "This CPU against the same int8 file computed as specified; per output: max / mean absolute difference, "
        f"and the mean that rounding alone gives (as specified, inputs nudged by noise of σ {INPUT_NUDGE:g})",
        "",
        "| variant | weights " + "".join(f"| {name}: this CPU − specified | {name}: rounding " for name in names) + "|",
        "|---|---|" + "---:|---:|" * len(names),
    ]
    for row in rows:
        cells = "".join(
            f" {o.off_specification_max:.2f} / {o.off_specification_mean:.3f} | {o.rounding_floor_mean:.3f} |"
            for o in row.outputs
        )
        lines.append(f"| {row.variant} | {row.weights} |{cells}")
    return lines


def speed_tables(series: list[SpeedSeries], rows: list[dict[str, Any]], checks: dict[str, str]) -> list[str]:
    lines = [
        "**MobileNetV2 speed**",
        "",
        "| backend | variant | weights | runs at | sync latency, median ms | async throughput, FPS "
        "| latency per round ms | FPS per round |",
        "|---|---|---|---|---:|---:|---|---|",
    ]
    for item in series:
        side = item.side
        lines.append(
            f"| {BACKEND_NAMES[side.backend]} | {side.variant} | {side.weights} | {item.runs_at} "
            f"| {fmt(median(item.latency_ms))} | {fmt(median(item.throughput_fps), 1)} "
            f"| {' '.join(f'{v:.2f}' for v in item.latency_ms)} | {' '.join(f'{v:.1f}' for v in item.throughput_fps)} |"
        )
    lines += [
        "",
        "| backend | latency 7-bit/8-bit (medians) | per round | throughput 7-bit/8-bit (medians) | per round |",
        "|---|---:|---|---:|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['backend']} | {fmt(row['latency'], 3)} | {' '.join(f'{v:.3f}' for v in row['latency_per_round'])} "
            f"| {fmt(row['throughput'], 3)} | {' '.join(f'{v:.3f}' for v in row['throughput_per_round'])} |"
        )
    lines += [
        "",
        "Kernels and weights (OpenVINO: compiled CPU graph's compute layers; ONNX Runtime: its optimized graph):",
        "",
    ]
    lines += [f"- {name}: {found}" for name, found in checks.items()]
    return lines


def describe_run(args: argparse.Namespace) -> dict[str, str]:
    cpu = read_cpu(Path("/"))
    flags = [flag for flag in REPORTED_FLAGS if flag in cpu_flags()]
    saturates = "pairs of int8 products saturate in 16 bits" if cpu.int8_pairs_saturate else "32-bit int8 accumulation"
    versions = [
        f"OpenVINO {version('openvino')}",
        f"NNCF {version('nncf')}",
        f"ONNX Runtime {version('onnxruntime')}",
        f"TensorFlow {version('tensorflow-cpu', 'tensorflow')}",
        f"tf2onnx {version('tf2onnx')}",
    ]
    return {
        "Command": "`" + shlex.join(["python", f"bench/{Path(__file__).name}", *sys.argv[1:]]) + "`",
        "Date": date.today().isoformat(),
        "CPU": f"{cpu_name()}, {len(os.sched_getaffinity(0))} cores, {', '.join(flags)}; {saturates}",
        "Versions": ", ".join(versions),
        "Speed settings": f"{args.rounds} rounds × {args.seconds:g} s per measurement, medians; MobileNetV2 "
        f"calibrated on {describe_calibration('photos')}",
    }


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", choices=["digits", "face", "speed"], default=["digits", "face", "speed"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per latency or throughput measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reconvert", action="store_true", help="convert MobileNetV2 again instead of using the cache")
    default_json = RESULTS.relative_to(BENCH.parent)
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"where every figure goes (default {default_json})")
    args = parser.parse_args()
    if args.rounds < 1 or args.seconds <= 0:
        parser.error("--rounds and --seconds must be positive")
    context = describe_run(args)
    results: dict[str, Any] = {"context": context}
    lines = [f"{key}: {value}  " for key, value in context.items()]
    if "speed" in args.parts:  # first, while no TensorFlow is loaded in this process
        series, checks, speed_ratios = speed_part(args)
        results["speed"] = {"series": [asdict(s) for s in series], "ratios": speed_ratios, "kernels": checks}
        lines += ["", *speed_tables(series, speed_ratios, checks)]
    with tempfile.TemporaryDirectory(prefix="int8-weight-range-") as scratch:
        if "digits" in args.parts:
            (Path(scratch) / "digits").mkdir()
            digit_rows, held_out = digits_part(Path(scratch) / "digits", args.seed)
            results["digits"] = [asdict(row) | {"drop_points": row.drop_points} for row in digit_rows]
            lines += ["", *digits_table(digit_rows, held_out)]
        if "face" in args.parts:
            face_rows, origin = face_part(Path(scratch), args.seed)
            results["face"] = {"evaluated_on": origin, "rows": [asdict(row) for row in face_rows]}
            lines += ["", *face_table(face_rows, origin)]
    print("\n".join(lines))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    print(f"\nwritten to {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
