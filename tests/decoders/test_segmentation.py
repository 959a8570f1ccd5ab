from __future__ import annotations

import cv2
import numpy as np
import pytest

from edge_runtime.backends.base import Quantization, TensorSpec
from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.decoded import Segmentation
from edge_runtime.errors import ConfigError, ModelMismatchError
from edge_runtime.package.manifest import InputSpec
from edge_runtime.pipeline.preprocess import FrameTransform, ImagePreprocessor

LABELS = ("background", "person", "car")
IDENTITY = FrameTransform(4, 4, 1.0, 1.0, 0.0, 0.0, 4, 4)
# a 4x4 scene: a person on the left, a car at the bottom right
SCENE = np.asarray([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 2, 2], [0, 0, 2, 2]], np.int32)


def one_hot_logits(index: np.ndarray, classes: int = 3) -> np.ndarray:
    """NHWC logits whose argmax is `index`."""
    return (np.eye(classes, dtype=np.float32)[index] * 6.0 - 3.0)[np.newaxis]


def decode(
    params: dict[str, object], output: np.ndarray, transform: FrameTransform = IDENTITY, spec: TensorSpec | None = None
) -> Segmentation:
    spec = spec or TensorSpec("mask", output.shape, str(output.dtype))
    result = make_decoder("segmentation", params, LABELS).decode([output], [spec], transform)
    assert isinstance(result, Segmentation)
    return result


def areas(result: Segmentation) -> dict[str, float]:
    return {c.label: c.area for c in result.classes}


def test_nhwc_logits_give_class_areas_largest_first() -> None:
    result = decode({}, one_hot_logits(SCENE))
    assert [c.label for c in result.classes] == ["person", "background", "car"]
    assert areas(result) == {"person": 7 / 16, "background": 5 / 16, "car": 4 / 16}
    assert result.to_dict() == {
        "segmentation": {
            "classes": [
                {"label": "person", "area": 0.4375},
                {"label": "background", "area": 0.3125},
                {"label": "car", "area": 0.25},
            ]
        }
    }
    assert result.signature() == ("background", "car", "person") and result.top_score is None


def test_nchw_scores_are_found_by_the_label_count_and_min_area_filters() -> None:
    nchw = one_hot_logits(SCENE).transpose(0, 3, 1, 2)
    assert areas(decode({}, nchw)) == areas(decode({"layout": "NCHW"}, nchw))
    assert [c.label for c in decode({"layout": "NCHW", "min_area": 0.3}, nchw).classes] == ["person", "background"]


def test_class_index_map_and_quantized_probabilities() -> None:
    assert areas(decode({}, SCENE[np.newaxis].astype(np.int64))) == {
        "person": 0.4375,
        "background": 0.3125,
        "car": 0.25,
    }
    probabilities = np.eye(3, dtype=np.float32)[SCENE][np.newaxis]
    q = np.rint(probabilities * 255).astype(np.uint8)
    spec = TensorSpec("probs", q.shape, "uint8", Quantization(1 / 255, 0))
    assert areas(decode({}, q, spec=spec)) == areas(decode({}, probabilities))


def test_one_channel_foreground_probability_uses_the_threshold() -> None:
    probability = np.asarray([[0.9, 0.6, 0.4, 0.1]] * 4, np.float32)[np.newaxis, ..., np.newaxis]  # [1, 4, 4, 1]
    assert areas(decode({}, probability)) == {"background": 0.5, "person": 0.5}
    assert areas(decode({"threshold": 0.8}, probability)) == {"background": 0.75, "person": 0.25}


def test_letterbox_padding_is_left_out_and_the_mask_png_is_in_source_pixels() -> None:
    spec = InputSpec(shape=(1, 8, 8, 3), layout="NHWC", resize="letterbox")
    _, transform = ImagePreprocessor(spec, TensorSpec("image", (1, 8, 8, 3), "float32"))(np.zeros((8, 16, 3), np.uint8))
    assert (transform.scale_y, transform.offset_y) == (0.5, 2)  # the picture fills model rows 2..5
    index = np.zeros((8, 8), np.int32)  # padding rows read as background, as models do
    index[2:6, :4], index[2:6, 4:] = 1, 2

    result = decode({"mask_png": True}, one_hot_logits(index), transform)

    assert areas(result) == {"person": 0.5, "car": 0.5}
    assert result.to_dict()["segmentation"]["mask"] == {"width": 16, "height": 8, "format": "png"}
    assert result.mask_png is not None and result.mask_size == (16, 8)
    mask = cv2.imdecode(np.frombuffer(result.mask_png, np.uint8), cv2.IMREAD_UNCHANGED)
    expected = np.zeros((8, 16), np.uint8)
    expected[:, :8], expected[:, 8:] = 1, 2
    assert mask.dtype == np.uint8 and np.array_equal(mask, expected)


def test_low_resolution_mask_is_scaled_to_the_source() -> None:
    # a model with a 4x4 mask for a 16x16 input, fed a 32x32 picture stretched to fit
    transform = FrameTransform(32, 32, 0.5, 0.5, 0.0, 0.0, 16, 16)
    result = decode({"mask_png": True}, one_hot_logits(SCENE), transform)
    assert result.mask_png is not None
    mask = cv2.imdecode(np.frombuffer(result.mask_png, np.uint8), cv2.IMREAD_UNCHANGED)
    assert np.array_equal(mask, np.kron(SCENE, np.ones((8, 8), np.int32)).astype(np.uint8))


def test_centre_crop_reports_what_the_model_saw() -> None:
    spec = InputSpec(shape=(1, 8, 8, 3), layout="NHWC", resize="crop")
    _, transform = ImagePreprocessor(spec, TensorSpec("image", (1, 8, 8, 3), "float32"))(np.zeros((8, 16, 3), np.uint8))
    assert transform.offset_x == -4  # the model sees source columns 4..11
    index = np.zeros((8, 8), np.int32)
    index[:, :4], index[:, 4:] = 1, 2

    result = decode({"mask_png": True}, one_hot_logits(index), transform)

    assert areas(result) == {"person": 0.5, "car": 0.5}
    assert result.mask_png is not None
    mask = cv2.imdecode(np.frombuffer(result.mask_png, np.uint8), cv2.IMREAD_UNCHANGED)
    assert mask[0].tolist() == [0] * 4 + [1] * 4 + [2] * 4 + [0] * 4


def test_output_that_disagrees_with_the_labels_is_a_model_mismatch() -> None:
    with pytest.raises(ModelMismatchError, match=r"expected 3 class channels \(one per label\) in NHWC order"):
        decode({"layout": "NHWC"}, np.zeros((1, 4, 4, 5), np.float32))
    with pytest.raises(ModelMismatchError, match=r"expected \[1, H, W, C\], \[1, C, H, W\] or \[1, H, W\]"):
        decode({}, np.zeros((2, 4, 4), np.float32))


@pytest.mark.parametrize(("params", "field"), [({"min_area": 2}, "min_area"), ({"layout": "HWC"}, "layout")])
def test_bad_parameters_name_the_field(params: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"decoder segmentation: decoder\.params\.{field}"):
        make_decoder("segmentation", params, LABELS)
