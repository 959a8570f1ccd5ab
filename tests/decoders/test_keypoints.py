from __future__ import annotations

import numpy as np
import pytest

from edge_runtime.backends.base import Quantization, TensorSpec
from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.decoded import Keypoints
from edge_runtime.errors import ConfigError, ModelMismatchError
from edge_runtime.pipeline.preprocess import FrameTransform

NAMES = ("nose", "left_eye", "right_eye")
# a 64x64 model input fed a 128x128 picture: source pixels = model pixels x 2
STRETCH = FrameTransform(128, 128, 0.5, 0.5, 0.0, 0.0, 64, 64)


def heatmaps() -> np.ndarray:
    """[1, 8, 8, 3] heatmaps (stride 8) with one clear peak per keypoint."""
    maps = np.zeros((8, 8, 3), np.float32)
    maps[2, 5, 0] = 0.9  # nose: cell (row 2, col 5), symmetric neighbours, no refinement
    maps[4, 3, 1] = 0.8  # left eye: its right neighbour is higher than its left one
    maps[4, 4, 1] = 0.3
    maps[6, 1, 2] = 0.1  # right eye: barely seen
    return maps[np.newaxis]


def decode(params: dict[str, object], output: np.ndarray, spec: TensorSpec | None = None) -> Keypoints:
    spec = spec or TensorSpec("out", output.shape, str(output.dtype))
    result = make_decoder("keypoints", params, NAMES).decode([output], [spec], STRETCH)
    assert isinstance(result, Keypoints)
    return result


def test_heatmap_peaks_in_source_pixels() -> None:
    result = decode({"format": "heatmap"}, heatmaps())
    nose, left_eye, right_eye = result.keypoints
    # cell centre (col + 0.5) x stride 8 model pixels x 2 source pixels per model pixel
    assert (nose.name, nose.x, nose.y, nose.score) == ("nose", 88.0, 40.0, pytest.approx(0.9))
    assert (left_eye.x, left_eye.y) == (3.75 * 16, 4.5 * 16)  # a quarter cell towards the higher neighbour
    assert (right_eye.x, right_eye.y) == (24.0, 104.0)
    assert result.top_score == pytest.approx(0.6)
    assert result.to_dict()["keypoints"][0] == {"name": "nose", "x": 88.0, "y": 40.0, "score": 0.9, "in_frame": True}


def test_nchw_heatmaps_and_min_score() -> None:
    nchw = heatmaps().transpose(0, 3, 1, 2)
    result = decode({"format": "heatmap", "layout": "NCHW", "min_score": 0.5}, nchw)
    assert [k.name for k in result.keypoints] == ["nose", "left_eye"]
    assert result.signature() == ("left_eye", "nose")
    assert (result.keypoints[0].x, result.keypoints[0].y) == (88.0, 40.0)


def test_regressed_coordinates_in_movenet_order() -> None:
    # MoveNet: [1, 1, K, 3] rows of (y, x, score), normalised
    output = np.asarray([[[[0.25, 0.5, 0.9], [0.5, 0.75, 0.7], [0.75, 0.125, 0.2]]]], np.float32)
    result = decode({"format": "coordinates", "order": "yx", "score_index": 2}, output)
    assert [(k.name, k.x, k.y, round(k.score, 2)) for k in result.keypoints] == [
        ("nose", 64.0, 32.0, 0.9),
        ("left_eye", 96.0, 64.0, 0.7),
        ("right_eye", 16.0, 96.0, 0.2),
    ]


def test_flat_pixel_coordinates_with_logit_scores() -> None:
    # MediaPipe-style: [1, K * 5] of (x, y, z, visibility logit, presence) in model-input pixels
    table = [[32.0, 16.0, 0.0, 4.0, 1.0], [8.0, 8.0, 0.0, 0.0, 1.0], [64.0, 64.0, 0.0, -4.0, 1.0]]
    output = np.asarray(table, np.float32).reshape(1, -1)
    params = {"format": "coordinates", "coordinates": "pixels", "score_index": 3, "activation": "sigmoid"}
    result = decode(params, output)
    assert [(k.x, k.y) for k in result.keypoints] == [(64.0, 32.0), (16.0, 16.0), (128.0, 128.0)]
    assert [round(k.score, 3) for k in result.keypoints] == [0.982, 0.5, 0.018]


def test_quantized_coordinates_and_no_scores() -> None:
    output = np.asarray([[64, 128, 128, 64, 0, 255]], np.uint8)  # x, y pairs; 1/256 steps
    spec = TensorSpec("landmarks", output.shape, "uint8", Quantization(1 / 256, 0))
    result = decode({"format": "coordinates"}, output, spec)
    assert [(k.x, k.y, k.score) for k in result.keypoints] == [
        (32.0, 64.0, 1.0),
        (64.0, 32.0, 1.0),
        (0.0, pytest.approx(127.5), 1.0),
    ]


def test_shape_mismatches_name_what_was_expected() -> None:
    with pytest.raises(ModelMismatchError, match=r"expected 3 heatmaps \(NHWC\), the output has shape \[1, 8, 8, 5\]"):
        decode({"format": "heatmap"}, np.zeros((1, 8, 8, 5), np.float32))
    with pytest.raises(ModelMismatchError, match=r"expected 3 keypoints with at least 3 values each.*\[1, 6\]"):
        decode({"format": "coordinates", "score_index": 2}, np.zeros((1, 6), np.float32))
    with pytest.raises(ModelMismatchError, match=r"expected heatmaps \[1, H, W, K\]"):
        decode({"format": "heatmap"}, np.zeros((1, 8, 8), np.float32))


def test_flat_output_without_a_keypoint_count_is_a_config_error() -> None:
    decoder = make_decoder("keypoints", {"format": "coordinates"}, ())
    with pytest.raises(ConfigError, match=r"decoder\.params\.num_keypoints is needed"):
        decoder.decode([np.zeros((1, 10), np.float32)], [TensorSpec("o", (1, 10), "float32")], STRETCH)
    counted = make_decoder("keypoints", {"format": "coordinates", "num_keypoints": 5}, ())
    result = counted.decode([np.zeros((1, 10), np.float32)], [TensorSpec("o", (1, 10), "float32")], STRETCH)
    assert isinstance(result, Keypoints) and [k.name for k in result.keypoints] == ["0", "1", "2", "3", "4"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, r"decoder\.params\.format: Field required"),
        ({"format": "heatmap", "layout": "HWC"}, r"decoder\.params\.layout"),
        ({"format": "heatmap", "num_keypoints": 17}, r"decoder\.params\.num_keypoints is 17 but the manifest has 3"),
    ],
)
def test_bad_parameters_name_the_field(params: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=rf"decoder keypoints: {message}"):
        make_decoder("keypoints", params, NAMES)


def test_a_keypoint_outside_the_frame_keeps_its_position_and_says_so() -> None:
    """A 64x32 picture letterboxed into the 64x64 input has 16 padding rows above and below it; a keypoint the model
    regresses into the top padding, or past the input's right edge, lies outside the frame and is not moved onto it."""
    letterbox = FrameTransform(64, 32, 1.0, 1.0, 0.0, 16.0, 64, 64)
    output = np.asarray([[[0.5, 0.5], [0.5, 0.125], [1.25, 0.5]]], np.float32)  # rows of (x, y), normalised
    result = make_decoder("keypoints", {"format": "coordinates"}, NAMES).decode(
        [output], [TensorSpec("out", output.shape, "float32")], letterbox
    )
    assert isinstance(result, Keypoints)
    assert [(k.name, k.x, k.y, k.in_frame) for k in result.keypoints] == [
        ("nose", 32.0, 16.0, True),
        ("left_eye", 32.0, -8.0, False),  # in the padding above the picture, not on its top edge
        ("right_eye", 80.0, 16.0, False),  # 16 px right of the 64 px wide frame, not on its right edge
    ]
    assert [k["in_frame"] for k in result.to_dict()["keypoints"]] == [True, False, False]
