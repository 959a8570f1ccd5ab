"""COCO annotation files: read into boxes per image, and every kind of mistake named with the file and entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from annotated_faces import FACE_MODEL, AnnotatedImages, face_decoder_params, face_detection_options

from converters.annotations import category_labels, load_annotated_images
from converters.errors import ConversionError
from converters.pipeline import convert
from converters.progress import Warnings
from edge_runtime.package.manifest import InputSpec

REPO = Path(__file__).resolve().parents[2]
FACE_SPEC = InputSpec(
    shape=(1, 128, 128, 3), layout="NHWC", color_order="RGB", resize="letterbox", mean=(127.5,), std=(127.5,)
)


def _write(tmp_path: Path, content: dict[str, Any] | str) -> Path:
    path = tmp_path / "annotations.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def _copy(faces: AnnotatedImages) -> dict[str, Any]:
    copied: dict[str, Any] = json.loads(json.dumps(faces.coco))
    return copied


def _refused(faces: AnnotatedImages, tmp_path: Path, coco: dict[str, Any] | str, *fragments: str) -> None:
    """Reading stops with a message naming the file and what is wrong in it."""
    path = _write(tmp_path, coco)
    with pytest.raises(ConversionError) as raised:
        load_annotated_images(path, faces.folder, [FACE_SPEC], ["face"], Warnings())
    message = str(raised.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_boxes_are_read_per_image_in_corner_form(annotated_faces: AnnotatedImages) -> None:
    warnings = Warnings()
    samples = load_annotated_images(
        annotated_faces.annotations, annotated_faces.folder, [FACE_SPEC], ["face"], warnings
    )
    assert len(samples) == 8 and samples.boxes is not None and len(samples.transforms) == 8
    assert [len(boxes) for boxes in samples.boxes] == [1, 1, 1, 1, 2, 0, 0, 0]
    astronaut = samples.boxes[0][0]
    assert (astronaut.label, astronaut.corners, astronaut.crowd) == ("face", (176.0, 80.0, 268.0, 174.0), False)
    two_faces = samples.transforms[4]
    assert (two_faces.source_width, two_faces.source_height) == (520, 260)
    assert samples.samples[0][0].shape == (1, 128, 128, 3)
    assert samples.labels is None and not warnings.items


def test_invalid_json(annotated_faces: AnnotatedImages, tmp_path: Path) -> None:
    _refused(annotated_faces, tmp_path, '{"images": [', "is not valid JSON", "line 1 column")


def test_missing_file(annotated_faces: AnnotatedImages, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.json"
    with pytest.raises(ConversionError, match=f"cannot read annotations {missing}: No such file"):
        load_annotated_images(missing, annotated_faces.folder, [FACE_SPEC], ["face"], Warnings())


@pytest.mark.parametrize("key", ["images", "annotations", "categories"])
def test_missing_top_level_list(annotated_faces: AnnotatedImages, tmp_path: Path, key: str) -> None:
    coco = _copy(annotated_faces)
    del coco[key]
    _refused(annotated_faces, tmp_path, coco, f"has no '{key}' list")


def test_image_entry_without_file_name(annotated_faces: AnnotatedImages, tmp_path: Path) -> None:
    coco = _copy(annotated_faces)
    del coco["images"][2]["file_name"]
    _refused(annotated_faces, tmp_path, coco, "images[2] has no 'file_name'")


def test_listed_image_missing_on_disk(annotated_faces: AnnotatedImages, tmp_path: Path) -> None:
    coco = _copy(annotated_faces)
    coco["images"][3]["file_name"] = "not_there.png"
    _refused(annotated_faces, tmp_path, coco, "images[3] lists 'not_there.png'", str(annotated_faces.folder))


def test_listed_size_differs_from_the_file(annotated_faces: AnnotatedImages, tmp_path: Path) -> None:
    coco = _copy(annotated_faces)
    coco["images"][4]["width"] = 1040
    _refused(annotated_faces, tmp_path, coco, "images[4].width is 1040", "two_faces.png is 520x260")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"bbox": [1, 2, 3]}, "annotations[1].bbox must be 4 numbers [x, y, width, height]"),
        ({"bbox": [10, 10, 0, 5]}, "annotations[1].bbox has width 0 and height 5"),
        ({"image_id": 99}, "annotations[1].image_id 99 is not among the images' ids"),
        ({"category_id": 7}, "annotations[1].category_id 7 is not among the categories"),
        ({"iscrowd": "yes"}, "annotations[1].iscrowd must be 0 or 1"),
    ],
)
def test_bad_annotation_entry(
    annotated_faces: AnnotatedImages, tmp_path: Path, change: dict[str, Any], fragment: str
) -> None:
    coco = _copy(annotated_faces)
    coco["annotations"][1].update(change)
    _refused(annotated_faces, tmp_path, coco, fragment)


def test_categories_that_are_not_the_models_labels(annotated_faces: AnnotatedImages, tmp_path: Path) -> None:
    coco = _copy(annotated_faces)
    coco["categories"].append({"id": 2, "name": "cat"})
    coco["annotations"].append({"id": 99, "image_id": 7, "bbox": [60, 20, 200, 220], "category_id": 2})
    _refused(annotated_faces, tmp_path, coco, "categories ['cat'] are not among the model's labels ['face']")


def test_only_crowd_regions_leave_nothing_to_score(annotated_faces: AnnotatedImages, tmp_path: Path) -> None:
    coco = _copy(annotated_faces)
    for entry in coco["annotations"]:
        entry["iscrowd"] = 1
    _refused(annotated_faces, tmp_path, coco, "holds no boxes")


def test_a_task_other_than_detection(annotated_faces: AnnotatedImages, tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="--annotations scores boxes of a detection model, but --task is"):
        convert(face_detection_options(tmp_path / "out", annotated_faces, task="classification"))
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_decoder_is_needed_and_must_return_boxes(annotated_faces: AnnotatedImages, tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="--annotations needs --decoder"):
        convert(face_detection_options(tmp_path / "a", annotated_faces, decoder=None, decoder_params=None))
    with pytest.raises(ConversionError, match="'classification' does not"):
        convert(face_detection_options(tmp_path / "b", annotated_faces, decoder="classification", decoder_params=None))


def test_the_images_folder_is_needed(annotated_faces: AnnotatedImages, tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="needs --validation FOLDER"):
        convert(face_detection_options(tmp_path / "out", annotated_faces, validation=None))


def test_categories_map_to_labels_by_name() -> None:
    categories = {1: "person", 3: "car", 9: "boat"}
    assert category_labels(categories, {1, 3}, ["car", "person"], Path("a.json"), Warnings()) == {1: "person", 3: "car"}


def test_a_single_class_model_takes_a_single_category_under_another_name() -> None:
    warnings = Warnings()
    assert category_labels({5: "human face"}, {5}, ["face"], Path("a.json"), warnings) == {5: "face"}
    assert warnings.items == ["annotations a.json: category 'human face' is scored as the model's only class 'face'"]
    assert category_labels({5: "face"}, {5}, [], Path("a.json"), Warnings()) == {5: "0"}


def test_several_categories_never_merge_into_one_class() -> None:
    with pytest.raises(ConversionError, match=r"categories \['cat', 'dog'\] are not among the model's labels"):
        category_labels({1: "cat", 2: "dog"}, {1, 2}, ["pet"], Path("a.json"), Warnings())
    with pytest.raises(ConversionError, match="give --labels so they can be matched by name"):
        category_labels({1: "cat", 2: "dog"}, {1, 2}, [], Path("a.json"), Warnings())


def test_command_line_reports_bad_annotations_in_one_line(annotated_faces: AnnotatedImages, tmp_path: Path) -> None:
    path = _write(tmp_path, {"images": [], "annotations": [], "categories": [{"id": 1, "name": "face"}]})
    args = [FACE_MODEL, "-o", tmp_path / "out", "--task", "detection", "--labels", "face", "--decoder", "ssd_anchors"]
    args += ["--decoder-params", face_decoder_params(), "--validation", annotated_faces.folder]
    args += ["--annotations", path, "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "converters.cli", *map(str, args)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=REPO, env=env, check=False)
    assert result.returncode == 2, result.stderr
    assert (
        result.stderr.strip() == f"edge-convert: error: annotations {path}: 'images' is empty; list the images to score"
    )
