from __future__ import annotations

import cv2
import numpy as np
import pytest

from edge_runtime.backends.base import Quantization, TensorSpec
from edge_runtime.errors import ConfigError
from edge_runtime.package.manifest import InputSpec


def make(spec: InputSpec, dtype: str = "float32", quantization: Quantization | None = None):  # type: ignore[no-untyped-def]
    from edge_runtime.pipeline.preprocess import ImagePreprocessor

    return ImagePreprocessor(spec, TensorSpec("x", spec.shape, dtype, quantization))


def test_stretch_rgb_normalised_nhwc() -> None:
    pre = make(InputSpec(shape=(1, 4, 8, 3), layout="NHWC", color_order="RGB", mean=(127.5,), std=(127.5,)))
    frame = np.zeros((40, 80, 3), np.uint8)
    frame[..., 0] = 255  # blue in BGR
    tensor, transform = pre(frame)
    assert tensor.shape == (1, 4, 8, 3) and tensor.dtype == np.float32
    assert np.allclose(tensor[0, :, :, 2], 1.0) and np.allclose(tensor[0, :, :, :2], -1.0)
    x, y = transform.to_source(np.array([0.5]), np.array([1.0]))
    assert (x[0], y[0]) == (40.0, 40.0)


def test_letterbox_pads_and_maps_back() -> None:
    pre = make(InputSpec(shape=(1, 3, 100, 100), layout="NCHW", resize="letterbox"))
    frame = np.full((50, 200, 3), 200, np.uint8)
    tensor, transform = pre(frame)
    assert tensor.shape == (1, 3, 100, 100)
    assert tensor[0, :, 0, :].max() == 0.0  # top padding row
    assert tensor[0, :, 50, :].min() == 200.0  # image rows in the middle
    x, y = transform.to_source(np.array([0.0, 1.0]), np.array([0.37, 0.62]))  # 37 padding rows
    assert np.allclose(x, [0, 200]) and np.allclose(y, [0, 50])


def test_points_outside_the_frame_keep_their_position_and_only_boxes_are_clipped() -> None:
    """A 200x50 frame letterboxed into 100x100 fills model rows 37..62: a point in the padding lies above or below the
    frame, where `to_source` leaves it; `to_source_clipped`, for box corners, moves it onto the frame's edge."""
    pre = make(InputSpec(shape=(1, 3, 100, 100), layout="NCHW", resize="letterbox"))
    _, transform = pre(np.zeros((50, 200, 3), np.uint8))
    model_x, model_y = np.array([0.5, 0.5, 1.1, 1.0]), np.array([0.1, 0.5, 0.5, 0.62])
    x, y = transform.to_source(model_x, model_y)
    assert np.allclose(x, [100, 100, 220, 200]) and np.allclose(y, [-54, 26, 26, 50])
    assert transform.in_frame(x, y).tolist() == [False, True, False, True]  # the frame's edges are on it
    x, y = transform.to_source_clipped(model_x, model_y)
    assert np.allclose(x, [100, 100, 200, 200]) and np.allclose(y, [0, 26, 26, 50])


@pytest.mark.parametrize("resize", ["letterbox", "crop"])
def test_each_axis_maps_back_with_the_scale_its_rounded_side_got(resize: str) -> None:
    """451 x 300 into 320 x 320 resizes to 320 x 213 (letterbox) or 481 x 320 (crop): across and down the picture is
    scaled by slightly different factors, and a point maps back by its own axis' factor, as Ultralytics maps boxes."""
    pre = make(InputSpec(shape=(1, 3, 320, 320), layout="NCHW", resize=resize))
    _, transform = pre(np.zeros((300, 451, 3), np.uint8))
    new_w, new_h = (320, 213) if resize == "letterbox" else (481, 320)
    assert (transform.scale_x, transform.scale_y) == (new_w / 451, new_h / 300)
    assert (transform.offset_x, transform.offset_y) == ((320 - new_w) // 2, (320 - new_h) // 2)
    # source pixel (400, 250) lies at offset + source * scale in the model input, per axis
    model_x = transform.offset_x + 400 * new_w / 451
    model_y = transform.offset_y + 250 * new_h / 300
    x, y = transform.to_source(np.array([model_x / 320]), np.array([model_y / 320]))
    assert x[0] == pytest.approx(400, abs=1e-9) and y[0] == pytest.approx(250, abs=1e-9)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_letterbox_border_has_the_spec_pad_value(layout: str) -> None:
    shape = (1, 3, 64, 64) if layout == "NCHW" else (1, 64, 64, 3)
    pre = make(InputSpec(shape=shape, layout=layout, color_order="RGB", resize="letterbox", pad_value=114, std=(255,)))
    tensor, transform = pre(np.full((48, 64, 3), 200, np.uint8))  # a 4:3 camera frame: 8 border rows above and below
    rows = tensor[0] if layout == "NCHW" else tensor[0].transpose(2, 0, 1)
    assert np.allclose(rows[:, :8], 114 / 255) and np.allclose(rows[:, -8:], 114 / 255)
    assert np.allclose(rows[:, 8:-8], 200 / 255)
    assert transform.offset_y == 8


@pytest.mark.parametrize(("colour", "channels"), [("RGB", (10, 20, 30)), ("BGR", (30, 20, 10))])
def test_letterbox_per_channel_pad_value_is_in_the_model_colour_order(colour: str, channels: tuple[int, ...]) -> None:
    pre = make(
        InputSpec(shape=(1, 3, 20, 20), layout="NCHW", color_order=colour, resize="letterbox", pad_value=channels)
    )
    tensor, _ = pre(np.zeros((10, 20, 3), np.uint8))
    assert [float(tensor[0, c, 0, 0]) for c in range(3)] == [float(v) for v in channels]


def test_letterbox_pad_value_for_a_grey_model_and_uint8_input() -> None:
    spec = InputSpec(shape=(1, 20, 20, 1), layout="NHWC", color_order="GRAY", resize="letterbox", pad_value=(77,))
    tensor, _ = make(spec, dtype="uint8")(np.full((10, 20, 3), 255, np.uint8))
    assert tensor.dtype == np.uint8 and tensor[0, 0, 0, 0] == 77 and tensor[0, 10, 10, 0] == 255


def test_crop_fills_the_input_and_maps_back() -> None:
    pre = make(InputSpec(shape=(1, 10, 10, 3), layout="NHWC", resize="crop"))
    frame = np.zeros((10, 30, 3), np.uint8)
    frame[:, 10:20] = 255
    tensor, transform = pre(frame)
    assert tensor.min() == 255.0  # only the centre survives the crop
    x, _ = transform.to_source(np.array([0.0, 1.0]), np.array([0.0]))
    assert np.allclose(x, [10, 20])


def test_quantized_input_uses_the_tensor_scale_and_zero_point() -> None:
    spec = InputSpec(shape=(1, 2, 2, 1), layout="NHWC", color_order="GRAY", mean=(0.0,), std=(255.0,))
    pre = make(spec, "int8", Quantization(scale=1 / 255, zero_point=-128))
    tensor, _ = pre(np.full((2, 2, 3), 255, np.uint8))
    assert tensor.dtype == np.int8 and tensor.max() == 127
    tensor, _ = pre(np.zeros((2, 2, 3), np.uint8))
    assert tensor.min() == -128


def test_uint8_identity_passes_pixels_through() -> None:
    pre = make(InputSpec(shape=(1, 2, 2, 3), layout="NHWC", dtype="uint8"), "uint8")
    frame = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    tensor, _ = pre(frame)
    assert tensor.dtype == np.uint8 and np.array_equal(tensor[0], frame)


def test_nchw_rgb_takes_each_channel_from_the_bgr_frame_in_model_order() -> None:
    pre = make(InputSpec(shape=(1, 3, 2, 2), layout="NCHW", color_order="RGB", mean=(1.0, 2.0, 3.0), std=(2.0,)))
    frame = np.empty((2, 2, 3), np.uint8)
    frame[..., 0], frame[..., 1], frame[..., 2] = 10, 20, 30  # B, G, R
    tensor, _ = pre(frame)
    assert tensor.flags.c_contiguous
    assert [float(tensor[0, c, 0, 0]) for c in range(3)] == [(30 - 1) / 2, (20 - 2) / 2, (10 - 3) / 2]


def test_a_one_channel_model_gets_grey_without_a_colour_order() -> None:
    pre = make(InputSpec(shape=(1, 2, 2, 1), layout="NHWC", mean=(0.0,), std=(255.0,)))
    frame = np.zeros((4, 4, 3), np.uint8)
    frame[..., 1] = 255  # pure green: grey level 150 (0.587 of 255)
    tensor, _ = pre(frame)
    assert tensor.shape == (1, 2, 2, 1)
    assert np.allclose(tensor, 150 / 255)


def test_a_colour_order_that_gives_the_wrong_channel_count_is_refused() -> None:
    with pytest.raises(ConfigError, match="color_order RGB gives 3 channel"):
        make(InputSpec(shape=(1, 8, 8, 1), layout="NHWC", color_order="RGB"))
    with pytest.raises(ConfigError, match="color_order GRAY gives 1 channel"):
        make(InputSpec(shape=(1, 3, 8, 8), layout="NCHW", color_order="GRAY"))


def test_non_image_input_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs an NHWC or NCHW 4-D shape"):
        make(InputSpec(shape=(1, 10), layout="NC"))


@pytest.mark.parametrize(
    ("layout", "shape", "expected"),
    [
        ("NTC", (1, 4, 2), [[[0, 1], [2, 3], [4, 5], [6, 7]]]),
        ("NCT", (1, 2, 4), [[[0, 2, 4, 6], [1, 3, 5, 7]]]),
        ("NC", (1, 8), [[0, 1, 2, 3, 4, 5, 6, 7]]),
    ],
)
def test_sensor_windows_follow_the_layout(layout: str, shape: tuple[int, ...], expected: list[object]) -> None:
    from edge_runtime.pipeline.preprocess import WindowPreprocessor

    spec = InputSpec(shape=shape, layout=layout)  # type: ignore[arg-type]
    pre = WindowPreprocessor(spec, TensorSpec("x", shape, "float32"))
    window = np.arange(8, dtype=np.float32).reshape(4, 2)
    tensor, transform = pre(window)
    assert np.array_equal(tensor, np.asarray(expected, np.float32)) and transform is None


def test_sensor_window_quantized_and_wrong_length() -> None:
    from edge_runtime.pipeline.preprocess import WindowPreprocessor

    spec = InputSpec(shape=(1, 3, 1), layout="NTC", mean=(1.0,), std=(2.0,))
    pre = WindowPreprocessor(spec, TensorSpec("x", spec.shape, "int8", Quantization(scale=0.5, zero_point=10)))
    assert pre(np.array([[1.0], [3.0], [-1.0]], np.float32))[0].tolist() == [[[10], [12], [8]]]
    with pytest.raises(ConfigError, match=r"a window gives shape \[1, 4, 1\], the model takes \[1, 3, 1\]"):
        pre(np.zeros((4, 1), np.float32))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("colour", ["RGB", "BGR", "GRAY"])
@pytest.mark.parametrize("resize", ["stretch", "letterbox", "crop"])
@pytest.mark.parametrize("normalisation", ["same for every channel", "per channel"])
def test_float_tensors_match_the_affine_map_of_the_fitted_frame(
    layout: str, colour: str, resize: str, normalisation: str
) -> None:
    channels = 1 if colour == "GRAY" else 3
    shape = (1, channels, 17, 23) if layout == "NCHW" else (1, 17, 23, channels)
    same = normalisation == "same for every channel"
    mean, std = ((127.5,), (127.5,)) if same else ((123.7, 116.3, 103.5)[:channels], (58.4, 57.1, 57.4)[:channels])
    pre = make(InputSpec(shape=shape, layout=layout, color_order=colour, resize=resize, mean=mean, std=std))
    frame = np.random.default_rng(7).integers(0, 256, (41, 60, 3), dtype=np.uint8)
    tensor, _ = pre(frame)
    fitted, _ = pre._fit(frame)
    grey = cv2.cvtColor(fitted, cv2.COLOR_BGR2GRAY)[..., np.newaxis]
    pixels = {"RGB": fitted[..., ::-1], "BGR": fitted, "GRAY": grey}[colour]
    expected = (pixels.astype(np.float32) - np.float32(mean)) / np.float32(std)
    expected = expected.transpose(2, 0, 1)[np.newaxis] if layout == "NCHW" else expected[np.newaxis]
    assert tensor.shape == expected.shape and tensor.flags.c_contiguous
    assert np.allclose(tensor, expected, atol=1e-4)
