"""Calibration and validation data: arrays, image folders, ImageFolder trees, and the errors for bad data."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from converters.calibration import load_calibration, load_validation, synthetic_samples
from converters.errors import ConversionError
from converters.progress import Warnings
from edge_runtime.backends.base import TensorSpec
from edge_runtime.package.manifest import InputSpec
from edge_runtime.pipeline.preprocess import ImagePreprocessor

NCHW = InputSpec(shape=(1, 3, 32, 32), layout="NCHW", color_order="RGB", mean=(127.5,), std=(127.5,))
NAMES = ["image"]


def _images(folder: Path, count: int, seed: int = 0) -> list[np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    images = [rng.integers(0, 256, (40, 48, 3), dtype=np.uint8) for _ in range(count)]
    for i, image in enumerate(images):
        cv2.imwrite(str(folder / f"img{i:03d}.png"), image)
    return images


@pytest.mark.parametrize("with_batch", [False, True])
def test_npy_arrays_with_or_without_batch_axis(tmp_path: Path, with_batch: bool) -> None:
    data = np.random.default_rng(0).normal(size=(10, 1, 3, 32, 32) if with_batch else (10, 3, 32, 32))
    np.save(tmp_path / "calib.npy", data)
    warnings = Warnings()
    samples = load_calibration(tmp_path / "calib.npy", [NCHW], NAMES, 300, 0, warnings)
    assert len(samples) == 10
    assert samples.samples[3][0].shape == (1, 3, 32, 32) and samples.samples[3][0].dtype == np.float32
    np.testing.assert_allclose(samples.samples[3][0].reshape(3, 32, 32), data.reshape(10, 3, 32, 32)[3], rtol=1e-6)
    assert warnings.items and "only 10 samples" in warnings.items[0]


def test_subset_is_a_seeded_choice(tmp_path: Path) -> None:
    data = np.arange(50, dtype=np.float32)[:, None, None, None] * np.ones((50, 3, 32, 32), np.float32)
    np.save(tmp_path / "calib.npy", data)

    def firsts(seed: int) -> list[float]:
        chosen = load_calibration(tmp_path / "calib.npy", [NCHW], NAMES, 8, seed, Warnings())
        return [float(s[0].flat[0]) for s in chosen.samples]

    assert firsts(0) == firsts(0)
    assert firsts(0) != firsts(1)
    assert len(set(firsts(0))) == 8 and firsts(0) == sorted(firsts(0))


def test_wrong_array_shape_names_path_and_expected_shape(tmp_path: Path) -> None:
    np.save(tmp_path / "calib.npy", np.zeros((5, 32, 32, 3), np.float32))
    with pytest.raises(ConversionError) as caught:
        load_calibration(tmp_path / "calib.npy", [NCHW], NAMES, 300, 0, Warnings())
    message = str(caught.value)
    assert str(tmp_path / "calib.npy") in message
    assert "[5, 32, 32, 3]" in message and "(N, 3, 32, 32)" in message


def test_npz_uses_x_and_rejects_missing_arrays(tmp_path: Path) -> None:
    np.savez(tmp_path / "good.npz", x=np.ones((4, 3, 32, 32), np.float32))
    assert len(load_calibration(tmp_path / "good.npz", [NCHW], NAMES, 300, 0, Warnings())) == 4
    np.savez(tmp_path / "bad.npz", a=np.ones((4, 3, 32, 32)), b=np.ones((4, 3, 32, 32)))
    with pytest.raises(ConversionError, match=r"bad\.npz has no array 'x' \(it has a, b\)"):
        load_calibration(tmp_path / "bad.npz", [NCHW], NAMES, 300, 0, Warnings())


def test_image_folder_is_preprocessed_as_the_input_spec_says(tmp_path: Path) -> None:
    images = _images(tmp_path / "calib" / "nested", 3)
    (tmp_path / "calib" / "README.txt").write_text("ignored")
    samples = load_calibration(tmp_path / "calib", [NCHW], NAMES, 300, 0, Warnings())
    expected = ImagePreprocessor(NCHW, TensorSpec("image", NCHW.shape, "float32"))(images[1])[0]
    np.testing.assert_array_equal(samples.samples[1][0], expected)
    assert samples.samples[1][0].shape == (1, 3, 32, 32)
    assert samples.samples[1][0].min() >= -1.0 and samples.samples[1][0].max() <= 1.0


def test_image_folder_letterbox_border_has_the_spec_pad_value(tmp_path: Path) -> None:
    _images(tmp_path / "calib", 2)  # 40 x 48 images become 27 x 32: 2 border rows above, 3 below
    spec = NCHW.model_copy(update={"resize": "letterbox", "pad_value": (114,), "mean": None, "std": (255.0,)})
    samples = load_calibration(tmp_path / "calib", [spec], NAMES, 300, 0, Warnings())
    tensor = samples.samples[0][0]
    assert np.allclose(tensor[0, :, :2], 114 / 255) and np.allclose(tensor[0, :, -3:], 114 / 255)


def test_empty_calibration_folder_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConversionError, match=r"calibration folder .*empty holds no images \(\.bmp"):
        load_calibration(tmp_path / "empty", [NCHW], NAMES, 300, 0, Warnings())


def test_unreadable_image_is_named(tmp_path: Path) -> None:
    _images(tmp_path / "calib", 2)
    (tmp_path / "calib" / "broken.jpg").write_bytes(b"not a jpeg at all")
    with pytest.raises(ConversionError, match=r"cannot read image .*broken\.jpg"):
        load_calibration(tmp_path / "calib", [NCHW], NAMES, 300, 0, Warnings())


def test_image_folder_needs_an_image_input(tmp_path: Path) -> None:
    _images(tmp_path / "calib", 1)
    vector = InputSpec(shape=(1, 16), layout="NC")
    with pytest.raises(ConversionError, match="needs a model with one image input"):
        load_calibration(tmp_path / "calib", [vector], ["x"], 300, 0, Warnings())


def test_image_folder_validation_maps_class_folders_to_labels(tmp_path: Path) -> None:
    _images(tmp_path / "val" / "dog", 2, seed=1)
    _images(tmp_path / "val" / "cat", 3, seed=2)
    by_folder = load_validation(tmp_path / "val", [NCHW], NAMES, ())
    assert by_folder.class_names == ("cat", "dog")
    assert by_folder.labels is not None and by_folder.labels.tolist() == [0, 0, 0, 1, 1]
    by_label = load_validation(tmp_path / "val", [NCHW], NAMES, ("dog", "bird", "cat"))
    assert by_label.labels is not None and by_label.labels.tolist() == [2, 2, 2, 0, 0]
    with pytest.raises(ConversionError, match="are not among the 3 labels"):
        load_validation(tmp_path / "val", [NCHW], NAMES, ("a", "b", "c"))


def test_npz_validation_needs_integer_y_of_matching_length(tmp_path: Path) -> None:
    x = np.zeros((4, 3, 32, 32), np.float32)
    np.savez(tmp_path / "v.npz", x=x, y=np.array([0, 1, 2, 3]))
    assert load_validation(tmp_path / "v.npz", [NCHW], NAMES, ()).labels.tolist() == [0, 1, 2, 3]  # type: ignore[union-attr]
    np.savez(tmp_path / "short.npz", x=x, y=np.array([0, 1]))
    with pytest.raises(ConversionError, match="'y' has 2 entries, 'x' has 4 samples"):
        load_validation(tmp_path / "short.npz", [NCHW], NAMES, ())
    np.savez(tmp_path / "noy.npz", x=x)
    with pytest.raises(ConversionError, match="no 'y' array"):
        load_validation(tmp_path / "noy.npz", [NCHW], NAMES, ())


def test_synthetic_samples_fit_the_inputs() -> None:
    samples = synthetic_samples([NCHW, InputSpec(shape=(1, 16), layout="NC")], 3, 0)
    assert len(samples) == 3
    assert [a.shape for a in samples.samples[0]] == [(1, 3, 32, 32), (1, 16)]
