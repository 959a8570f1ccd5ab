"""The package `quantized_speed.py` measures: Keras's MobileNetV2 converted by edge-convert, kept between runs.

The model has seeded random weights (a network's speed does not depend on what its weights have learnt)
and is converted by the project's own converter into openvino/fp32, openvino/int8 (NNCF) and tflite/fp32,
tflite/int8 (full integer), or into the variants a caller names (`int8_weight_range.py` asks for the
ONNX ones too), calibrated on random crops and flips of scikit-image's sample photos, or on seeded noise.
OpenVINO and ONNX int8 weights keep to 7 bits, the converter's default, unless full-range weights are
asked for. The conversion runs in a child process, so the measuring process never loads TensorFlow, and
its package is kept in bench/.cache/ under a name that changes with the toolchain's versions, the
variants and the weight range.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.loader import open_package

CACHE = Path(__file__).resolve().parent / ".cache" / "quantized_speed"
VARIANTS = ("openvino/fp32", "openvino/int8", "tflite/fp32", "tflite/int8")
CALIBRATION_SAMPLES = 300
# scikit-image's sample photos that ship with the wheel (the others are downloaded on first use)
PHOTOS = (
    "astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "retina",
    "camera", "coins", "moon", "brick", "grass", "gravel", "page", "text", "clock", "cell", "microaneurysms",
)  # fmt: skip


def describe_calibration(calibration: str) -> str:
    if calibration == "photos":
        return f"{CALIBRATION_SAMPLES} random crops and flips of {len(PHOTOS)} scikit-image sample photos"
    return f"{CALIBRATION_SAMPLES} seeded uniform-noise tensors in the input range [-1, 1]"


def version(*distributions: str) -> str:
    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "missing"


def package_key(seed: int, calibration: str, variants: tuple[str, ...], full_range_weights: bool) -> str:
    """Cache folder name: what the package depends on, so another toolchain or setting converts afresh."""
    tools = [version("tensorflow-cpu", "tensorflow"), version("keras"), version("openvino"), version("nncf")]
    tools.append(version("onnxruntime"))
    formats = "+".join(variant.replace("/", "_") for variant in sorted(variants))
    weights = "w8" if full_range_weights else "w7"
    return "-".join(["mobilenet_v2", f"seed{seed}", calibration, formats, weights, *tools])


def converted_package(
    seed: int,
    calibration: str,
    reconvert: bool,
    variants: tuple[str, ...] = VARIANTS,
    full_range_weights: bool = False,
) -> Path:
    """The cached package, converted first when missing; the conversion runs in a child without TensorFlow here."""
    target = CACHE / package_key(seed, calibration, variants, full_range_weights)
    if not reconvert and cached(target, variants):
        return target
    shutil.rmtree(target, ignore_errors=True)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    print(f"converting MobileNetV2 into {target} (once; later runs reuse it)", file=sys.stderr)
    child = multiprocessing.get_context("spawn").Process(
        target=convert, args=(partial, seed, calibration, variants, full_range_weights)
    )
    child.start()
    child.join()
    if child.exitcode != 0:
        raise SystemExit(f"the conversion failed (exit {child.exitcode}); its messages are above")
    missing = set(variants) - set(open_package(partial).manifest.variants)
    if missing:
        raise SystemExit(f"the converter did not package {', '.join(sorted(missing))}: see {partial / 'report.md'}")
    partial.rename(target)
    return target


def cached(package: Path, variants: tuple[str, ...]) -> bool:
    try:
        return set(variants) <= set(open_package(package).manifest.variants)
    except EdgeRuntimeError:  # missing or damaged: converted again
        return False


def convert(out_dir: Path, seed: int, calibration: str, variants: tuple[str, ...], full_range_weights: bool) -> None:
    import keras

    from converters.cli import main as edge_convert

    sys.stdout.flush()
    os.dup2(2, 1)  # the converter's summary would land in the middle of the table on stdout
    with tempfile.TemporaryDirectory(prefix="quantized-speed-") as scratch:
        work = Path(scratch)
        keras.utils.set_random_seed(seed)
        model = keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3), classes=1000)
        model.save(work / "mobilenet_v2.keras")
        data = calibration_photos(work / "calibration", seed) if calibration == "photos" else noise(work, seed)
        argv = [str(work / "mobilenet_v2.keras"), "-o", str(out_dir), "--name", "mobilenet_v2", "--overwrite"]
        argv += ["--variants", ",".join(variants), "--calibration", str(data), "--bench-seconds", "0"]
        argv += ["--mean", "127.5", "--std", "127.5", "--color-order", "RGB", "--seed", str(seed)]
        argv += ["--full-range-weights"] if full_range_weights else []
        sys.exit(edge_convert(argv))


def calibration_photos(folder: Path, seed: int, count: int = CALIBRATION_SAMPLES, size: int = 224) -> Path:
    """Random square crops (40-100% of the short side) of the sample photos, half of them mirrored, size × size."""
    import cv2
    from skimage import data

    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    photos = [_as_rgb(getattr(data, name)()) for name in PHOTOS]
    for index in range(count):
        photo = photos[index % len(photos)]
        height, width = photo.shape[:2]
        side = int(min(height, width) * rng.uniform(0.4, 1.0))
        top, left = int(rng.integers(0, height - side + 1)), int(rng.integers(0, width - side + 1))
        crop = photo[top : top + side, left : left + side]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        crop = cv2.resize(np.ascontiguousarray(crop), (size, size), interpolation=cv2.INTER_AREA)
        cv2.imwrite(str(folder / f"{index:03d}.png"), cv2.cvtColor(crop, cv2.COLOR_RGB2BGR))
    return folder


def _as_rgb(image: np.ndarray) -> np.ndarray:
    """The photos are uint8, some of them grey: those become three equal channels."""
    if image.ndim == 2:
        return np.repeat(image[:, :, None], 3, axis=2)
    return np.ascontiguousarray(image[:, :, :3])


def noise(work: Path, seed: int) -> Path:
    """Seeded uniform noise in the model's input range [-1, 1], already preprocessed."""
    path = work / "calibration.npy"
    rng = np.random.default_rng(seed)
    np.save(path, rng.uniform(-1, 1, (CALIBRATION_SAMPLES, 224, 224, 3)).astype(np.float32))
    return path
