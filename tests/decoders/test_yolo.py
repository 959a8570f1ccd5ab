from __future__ import annotations

import numpy as np
import pytest

from edge_runtime.backends.base import Quantization, TensorSpec
from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.decoded import Detections
from edge_runtime.errors import ConfigError, ModelMismatchError
from edge_runtime.package.manifest import InputSpec
from edge_runtime.pipeline.preprocess import FrameTransform, ImagePreprocessor

LABELS = ("person", "car", "dog")

# candidates in 640x640 model-input pixels: centre x, centre y, width, height, then one score per class
PERSON = (200.0, 300.0, 100.0, 200.0)  # x 150..250, y 200..400
PERSON_AGAIN = (204.0, 302.0, 100.0, 196.0)  # the same person, found by a neighbouring anchor
CAR = (450.0, 320.0, 120.0, 60.0)  # x 390..510, y 290..350
FAINT_DOG = (100.0, 250.0, 40.0, 40.0)


def letterbox_transform() -> FrameTransform:
    """What the real preprocessor reports for a 1280x720 frame letterboxed into a 640x640 input."""
    spec = InputSpec(shape=(1, 640, 640, 3), layout="NHWC", resize="letterbox", color_order="RGB")
    _, transform = ImagePreprocessor(spec, TensorSpec("images", (1, 640, 640, 3), "float32"))(
        np.zeros((720, 1280, 3), np.uint8)
    )
    assert (transform.scale_x, transform.offset_x, transform.offset_y) == (0.5, 0, 140)
    return transform


def v8_rows() -> np.ndarray:
    """Candidates as rows (box, class scores), in the order the head emits them."""
    return np.asarray(
        [
            [*PERSON, 0.90, 0.05, 0.01],
            [*FAINT_DOG, 0.01, 0.02, 0.10],
            [*PERSON_AGAIN, 0.80, 0.04, 0.01],
            [*CAR, 0.02, 0.70, 0.03],
        ],
        np.float32,
    )


def decode(params: dict[str, object], output: np.ndarray, spec: TensorSpec | None = None) -> Detections:
    spec = spec or TensorSpec("output0", output.shape, "float32")
    result = make_decoder("yolo", params, LABELS).decode([output], [spec], letterbox_transform())
    assert isinstance(result, Detections)
    return result


def assert_person_and_car(result: Detections, tolerance: float = 0.01) -> None:
    assert [(d.label, round(d.score, 2)) for d in result.detections] == [("person", 0.9), ("car", 0.7)]
    person, car = (d.box for d in result.detections)
    # source x = model x / 0.5, source y = (model y - 140) / 0.5
    assert person == pytest.approx((300, 120, 500, 520), abs=tolerance)
    assert car == pytest.approx((780, 300, 1020, 420), abs=tolerance)


def test_v8_output_keeps_two_boxes_and_maps_them_to_source_pixels() -> None:
    output = v8_rows().T[np.newaxis]  # [1, 4 + C, N], as Ultralytics exports it
    result = decode({}, output)
    assert_person_and_car(result)
    assert result.signature() == ("car", "person") and result.top_score == pytest.approx(0.9)
    assert result.to_dict()["detections"][0] == {"label": "person", "score": 0.9, "box": [300.0, 120.0, 500.0, 520.0]}


def test_boxes_on_a_frame_whose_letterbox_rounds_map_back_exactly() -> None:
    """451 x 300 letterboxed into 320 x 320 fills 320 x 213 from row 53: rows scale by 213/300, columns by 320/451,
    so model rows 124..195 are source rows 100..200 (the single scale 320/451 would give 100.07..200.13)."""
    spec = InputSpec(shape=(1, 3, 320, 320), layout="NCHW", resize="letterbox", color_order="RGB")
    _, transform = ImagePreprocessor(spec, TensorSpec("images", spec.shape, "float32"))(
        np.zeros((300, 451, 3), np.uint8)
    )
    box = (160.0, 159.5, 320 / 451 * 200, 71.0)  # x 89.07..230.93, y 124..195
    output = np.asarray([[*box, 0.9, 0.0, 0.0]], np.float32).T[np.newaxis]
    result = make_decoder("yolo", {}, LABELS).decode(
        [output], [TensorSpec("output0", output.shape, "float32")], transform
    )
    assert isinstance(result, Detections)
    (person,) = result.detections
    assert person.box == pytest.approx((125.5, 100.0, 325.5, 200.0), abs=1e-3)


def test_v8_rows_not_transposed_are_recognised_by_the_label_count() -> None:
    assert_person_and_car(decode({"layout": "v8"}, v8_rows()[np.newaxis]))


def test_v5_output_multiplies_objectness_and_class_score() -> None:
    output = np.asarray(
        [
            [*PERSON, 1.0, 0.9, 0.05, 0.01],
            [*FAINT_DOG, 0.5, 0.01, 0.02, 0.2],
            [*PERSON_AGAIN, 1.0, 0.8, 0.04, 0.01],
            [*CAR, 0.875, 0.02, 0.8, 0.03],  # 0.875 x 0.8 = 0.7
        ],
        np.float32,
    )[np.newaxis]  # [1, N, 5 + C]
    assert_person_and_car(decode({}, output))


def test_normalised_boxes_of_tflite_exports() -> None:
    rows = v8_rows()
    rows[:, :4] /= 640
    assert_person_and_car(decode({}, rows.T[np.newaxis]), tolerance=0.05)
    assert_person_and_car(decode({"coordinates": "normalized"}, rows.T[np.newaxis]), tolerance=0.05)


def test_quantized_int8_output() -> None:
    rows = v8_rows()
    rows[:, :4] /= 640
    scale, zero_point = 1 / 255, -128
    q = np.clip(np.rint(rows.T[np.newaxis] / scale + zero_point), -128, 127).astype(np.int8)
    spec = TensorSpec("output0", q.shape, "int8", Quantization(scale, zero_point))
    result = decode({}, q, spec)
    # one quantization step is 640/255 model pixels, i.e. about 5 source pixels
    assert_person_and_car(result, tolerance=5.1)


def test_per_class_suppression_keeps_overlapping_objects_of_other_classes() -> None:
    rows = np.concatenate([v8_rows(), np.asarray([[*PERSON, 0.01, 0.60, 0.01]], np.float32)])
    per_class = decode({}, rows.T[np.newaxis])
    assert [d.label for d in per_class.detections] == ["person", "car", "car"]
    agnostic = decode({"class_agnostic": True}, rows.T[np.newaxis])
    assert [d.label for d in agnostic.detections] == ["person", "car"]


def test_min_score_iou_threshold_and_max_detections() -> None:
    output = v8_rows().T[np.newaxis]
    assert [d.label for d in decode({"min_score": 0.05}, output).detections] == ["person", "car", "dog"]
    # with a high IoU threshold the duplicate person is no longer suppressed (IoU about 0.9)
    assert [round(d.score, 2) for d in decode({"iou_threshold": 0.95}, output).detections] == [0.9, 0.8, 0.7]
    assert [d.label for d in decode({"max_detections": 1}, output).detections] == ["person"]
    assert decode({"min_score": 0.95}, output) == Detections()


def test_layout_from_shape_without_labels() -> None:
    # a real head has far more candidates than attributes: the shorter axis holds the attributes
    rows = np.concatenate([v8_rows(), np.zeros((40, 7), np.float32)])
    output = rows.T[np.newaxis]
    result = make_decoder("yolo", {}, ()).decode(
        [output], [TensorSpec("o", output.shape, "float32")], letterbox_transform()
    )
    assert [d.label for d in result.detections] == ["0", "1"]


def test_output_that_disagrees_with_the_labels_is_a_model_mismatch() -> None:
    output = np.zeros((1, 10, 100), np.float32)
    with pytest.raises(ModelMismatchError, match=r"expected an axis of 8 \(v5\) or 7 \(v8\) attributes for 3 labels"):
        decode({}, output)
    with pytest.raises(ModelMismatchError, match=r"expected an axis of 7 \(v8\) attributes"):
        decode({"layout": "v8"}, np.zeros((1, 100, 8), np.float32))
    with pytest.raises(ModelMismatchError, match=r"expected an output of shape \[1, candidates, attributes\]"):
        decode({}, np.zeros((2, 7, 100), np.float32))


def test_needs_an_image_input() -> None:
    output = v8_rows().T[np.newaxis]
    with pytest.raises(ConfigError, match="decoder yolo reports image positions and needs an image input"):
        make_decoder("yolo", {}, LABELS).decode([output], [TensorSpec("o", output.shape, "float32")])


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"iou_threshold": 1.5}, "iou_threshold"),
        ({"layout": "v3"}, "layout"),
        ({"max_detections": 0}, "max_detections"),
    ],
)
def test_bad_parameters_name_the_field(params: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"decoder yolo: decoder\.params\.{field}"):
        make_decoder("yolo", params, LABELS)
