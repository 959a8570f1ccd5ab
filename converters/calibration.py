"""Calibration and validation samples, in the model's own input tensors.

Images are preprocessed by the runtime's own `ImagePreprocessor` from the manifest's input spec, so the
quantizers see exactly the tensors the deployed model will be fed. Arrays are taken as already
preprocessed. Every sample is a list with one array per model input, each with a batch of 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from converters.detection_metrics import Box
from converters.errors import ConversionError
from converters.progress import Warnings, step
from edge_runtime.backends.base import TensorSpec
from edge_runtime.package.manifest import InputSpec
from edge_runtime.pipeline.preprocess import FrameTransform, ImagePreprocessor

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm"})
RECOMMENDED_SAMPLES = 300

Sample = list[np.ndarray]
T = TypeVar("T")


@dataclass(frozen=True)
class SampleSet:
    samples: list[Sample]
    origin: str
    labels: np.ndarray | None = None  # class index per sample
    class_names: tuple[str, ...] = ()
    boxes: tuple[tuple[Box, ...], ...] | None = None  # annotated boxes per sample (detection), in image pixels
    transforms: tuple[FrameTransform, ...] = ()  # per sample with boxes: model coordinates to image pixels

    def __len__(self) -> int:
        return len(self.samples)


def load_calibration(
    path: Path, specs: Sequence[InputSpec], names: Sequence[str], subset_size: int, seed: int, warnings: Warnings
) -> SampleSet:
    """Up to `subset_size` samples (a seeded random choice when there are more) from a folder, .npy or .npz."""
    if path.is_dir():
        files = _pick(image_files(path, "calibration"), subset_size, seed)
        samples = [[image] for image in _read_images(files, only_image_spec(specs, path))]
    else:
        arrays = _read_arrays(path, specs, names)
        samples = _split(arrays, _pick(list(range(len(arrays[0]))), subset_size, seed))
    if not samples:
        raise ConversionError(f"calibration data {path} holds no samples")
    if len(samples) < RECOMMENDED_SAMPLES:
        warnings.add(
            f"calibration uses only {len(samples)} samples from {path} (fewer than {RECOMMENDED_SAMPLES}); "
            "quantization ranges may not cover real inputs and int8 accuracy may suffer"
        )
    return SampleSet(samples=samples, origin=f"{len(samples)} samples from {path}")


def load_validation(path: Path, specs: Sequence[InputSpec], names: Sequence[str], labels: Sequence[str]) -> SampleSet:
    """A labelled set: an ImageFolder tree (one folder per class) or an .npz with `x` (or one key per input) and `y`."""
    if path.is_dir():
        return _image_folder(path, only_image_spec(specs, path), labels)
    arrays = _read_arrays(path, specs, names)
    with _open_npz(path) as data:
        if "y" not in data:
            raise ConversionError(f"validation data {path} has no 'y' array of class indices")
        y = np.asarray(data["y"]).reshape(-1)
    if len(y) != len(arrays[0]):
        raise ConversionError(f"validation data {path}: 'y' has {len(y)} entries, 'x' has {len(arrays[0])} samples")
    if not np.issubdtype(y.dtype, np.number) or not np.all(np.equal(np.mod(y, 1), 0)):
        raise ConversionError(f"validation data {path}: 'y' must hold integer class indices")
    samples = _split(arrays, list(range(len(y))))
    return SampleSet(samples, f"{len(samples)} samples from {path}", labels=y.astype(np.int64))


def image_files(folder: Path, role: str) -> list[Path]:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        kinds = ", ".join(sorted(IMAGE_SUFFIXES))
        raise ConversionError(f"{role} folder {folder} holds no images ({kinds})")
    return files


def _pick(items: list[T], count: int, seed: int) -> list[T]:
    """A seeded random subset in the original order, so the same inputs give the same calibration."""
    if len(items) <= count:
        return list(items)
    chosen = np.sort(np.random.default_rng(seed).choice(len(items), size=count, replace=False))
    return [items[int(i)] for i in chosen]


def only_image_spec(specs: Sequence[InputSpec], path: Path) -> InputSpec:
    if len(specs) != 1 or specs[0].spatial_size is None:
        shapes = ", ".join(str(list(s.shape)) for s in specs)
        raise ConversionError(
            f"{path} is an image folder, which needs a model with one image input (NCHW or NHWC); this model "
            f"takes {shapes} with layout {', '.join(s.layout for s in specs)}; give .npy/.npz arrays instead"
        )
    return specs[0]


def _read_images(files: Sequence[Path], spec: InputSpec) -> list[np.ndarray]:
    return [tensor for tensor, _ in preprocess_images(files, spec)]


def preprocess_images(files: Sequence[Path], spec: InputSpec) -> list[tuple[np.ndarray, FrameTransform]]:
    """Each image as the model's input tensor, with the transform that maps model coordinates back to its pixels."""
    import cv2

    preprocess = ImagePreprocessor(spec, TensorSpec("input", spec.shape, spec.dtype))
    step(f"reading {len(files)} images from {files[0].parent if files else ''}")
    prepared = []
    for file in files:
        image = cv2.imread(str(file), cv2.IMREAD_COLOR)
        if image is None:
            raise ConversionError(f"cannot read image {file} (not an image or corrupt); remove it or replace it")
        prepared.append(preprocess(image))
    return prepared


def _image_folder(root: Path, spec: InputSpec, labels: Sequence[str]) -> SampleSet:
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise ConversionError(f"validation folder {root} must hold one sub-folder of images per class (ImageFolder)")
    index = _class_index(root, classes, labels)
    files: list[Path] = []
    targets: list[int] = []
    for name in classes:
        found = sorted(p for p in (root / name).rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        files += found
        targets += [index[name]] * len(found)
    if not files:
        raise ConversionError(f"validation folder {root} holds no images in its class folders")
    samples = [[image] for image in _read_images(files, spec)]
    origin = f"{len(samples)} images in {len(classes)} classes from {root}"
    return SampleSet(samples, origin, labels=np.asarray(targets, np.int64), class_names=tuple(classes))


def _class_index(root: Path, classes: list[str], labels: Sequence[str]) -> dict[str, int]:
    """Class folders map to labels by name, or by sorted position when the folders are ids (e.g. synsets)."""
    if not labels:
        return {name: i for i, name in enumerate(classes)}
    if all(name in labels for name in classes):
        return {name: list(labels).index(name) for name in classes}
    if len(classes) == len(labels):
        return {name: i for i, name in enumerate(classes)}
    unknown = [name for name in classes if name not in labels][:3]
    raise ConversionError(
        f"validation folder {root}: class folders {unknown} are not among the {len(labels)} labels, and the "
        f"{len(classes)} folders cannot map to them by position"
    )


def _open_npz(path: Path) -> np.lib.npyio.NpzFile:
    try:
        data: np.lib.npyio.NpzFile = np.load(path, allow_pickle=False)
        return data
    except (OSError, ValueError) as error:
        raise ConversionError(f"cannot read {path} as .npz: {error}") from None


def _read_arrays(path: Path, specs: Sequence[InputSpec], names: Sequence[str]) -> list[np.ndarray]:
    """One array of samples per model input, each shaped (N, *input shape), the batch of 1 included."""
    if not path.is_file():
        raise ConversionError(f"calibration/validation data not found: {path}")
    if path.suffix == ".npy":
        if len(specs) != 1:
            raise ConversionError(f"{path}: a .npy holds one input; this model has {len(specs)}, use .npz")
        try:
            raw = [np.load(path, allow_pickle=False)]
        except (OSError, ValueError) as error:
            raise ConversionError(f"cannot read {path} as .npy: {error}") from None
    elif path.suffix == ".npz":
        with _open_npz(path) as data:
            raw = [_npz_entry(data, path, name, len(specs)) for name in names]
    else:
        raise ConversionError(f"{path}: calibration/validation data must be an image folder, .npy or .npz")
    arrays = [_as_samples(array, spec, path) for array, spec in zip(raw, specs, strict=True)]
    if len({len(a) for a in arrays}) > 1:
        raise ConversionError(f"{path}: the inputs' arrays hold different numbers of samples")
    return arrays


def _npz_entry(data: np.lib.npyio.NpzFile, path: Path, name: str, inputs: int) -> np.ndarray:
    arrays = [key for key in data.files if key != "y"]
    if inputs == 1:
        key = "x" if "x" in data.files else name if name in data.files else arrays[0] if len(arrays) == 1 else None
    else:
        key = name if name in data.files else None
    if key is None:
        wanted = "array 'x'" if inputs == 1 else f"array named {name!r} (one per model input)"
        raise ConversionError(f"{path} has no {wanted} (it has {', '.join(data.files) or 'nothing'})")
    return np.asarray(data[key])


def _as_samples(array: np.ndarray, spec: InputSpec, path: Path) -> np.ndarray:
    """(N, *shape[1:]) or (N, *shape) arrays as (N, *shape) in the input's dtype."""
    single = spec.shape[1:] if spec.shape[0] == 1 else spec.shape
    if array.ndim == len(spec.shape) + 1 and tuple(array.shape[1:]) == spec.shape:
        batched = array
    elif array.ndim == len(single) + 1 and tuple(array.shape[1:]) == single:
        batched = array.reshape(len(array), *spec.shape)
    else:
        expected = f"(N, {', '.join(map(str, single))})"
        raise ConversionError(
            f"{path}: array of shape {list(array.shape)} does not fit the model input {list(spec.shape)}; "
            f"expected {expected} or (N, {', '.join(map(str, spec.shape))}), N samples"
        )
    if not np.issubdtype(array.dtype, np.number):
        raise ConversionError(f"{path}: array of dtype {array.dtype} is not numeric")
    return np.ascontiguousarray(batched, dtype=spec.dtype)


def _split(arrays: list[np.ndarray], indices: list[int]) -> list[Sample]:
    return [[np.ascontiguousarray(a[i]) for a in arrays] for i in indices]


def synthetic_samples(specs: Sequence[InputSpec], count: int, seed: int) -> SampleSet:
    """Stand-in inputs when no data is given: photo-like frames for image inputs, normal noise otherwise."""
    from edge_runtime.measure.fidelity import synthetic_frames

    rng = np.random.default_rng(seed)
    per_input: list[list[np.ndarray]] = []
    for spec in specs:
        size = spec.spatial_size
        if size is not None:
            preprocess = ImagePreprocessor(spec, TensorSpec("input", spec.shape, spec.dtype))
            per_input.append([preprocess(f)[0] for f in synthetic_frames(count, size[0] * 2, size[1] * 2, seed)])
        else:
            per_input.append([rng.standard_normal(spec.shape).astype(spec.dtype) for _ in range(count)])
    samples = [list(arrays) for arrays in zip(*per_input, strict=True)]
    return SampleSet(samples, f"{count} synthetic samples (no calibration or validation data given)")


def read_training_arrays(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Labelled training data from an .npz of arrays `x` (inputs) and `y` (one class index per sample), read
    without unpickling: the file may come from anywhere, and a pickled object array would run its code."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if "x" not in data or "y" not in data:
                raise ConversionError(f"training data {path} needs arrays 'x' and 'y' (it has {', '.join(data.files)})")
            return np.asarray(data["x"]), np.asarray(data["y"]).reshape(-1)
    except (OSError, ValueError) as error:
        raise ConversionError(f"cannot read training data {path} as .npz: {error}") from None
