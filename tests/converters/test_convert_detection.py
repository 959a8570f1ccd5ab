"""mAP@0.5 of MediaPipe's real BlazeFace detector and its variants, scored against hand-drawn face boxes."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from annotated_faces import FACE_MODEL, AnnotatedImages, face_decoder_params, face_detection_options

from converters.cli import main
from converters.pipeline import convert
from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.decoded import Detections
from edge_runtime.package.loader import open_package
from edge_runtime.pipeline.preprocess import ImagePreprocessor
from edge_runtime.placement.model import load_model


@pytest.fixture(scope="module")
def calibration_crops(astronaut_bgr: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("face_calibration")
    for i in range(12):
        cv2.imwrite(str(folder / f"crop{i:02d}.jpg"), astronaut_bgr[i * 15 : 512 - i * 5, i * 10 :])
    return folder


@pytest.fixture(scope="module")
def converted(
    annotated_faces: AnnotatedImages, calibration_crops: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], Path]:
    """One conversion through the command line, as a user runs it; the report read back from report.json."""
    out_dir = tmp_path_factory.mktemp("face_detection_package")
    args = [FACE_MODEL, "-o", out_dir, "--task", "detection", "--labels", "face", "--color-order", "RGB"]
    args += ["--mean", "127.5", "--std", "127.5", "--resize", "letterbox", "--decoder", "ssd_anchors"]
    args += ["--decoder-params", face_decoder_params(), "--calibration", calibration_crops]
    args += ["--validation", annotated_faces.folder, "--annotations", annotated_faces.annotations]
    args += ["--bench-seconds", "0", "--quiet"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([str(a) for a in args]) == 0
    return json.loads((out_dir / "report.json").read_text(encoding="utf-8")), out_dir


def _rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["variant_id"]: row for row in report["variants"]}


def test_reference_and_fp32_variant_find_the_annotated_faces(converted: tuple[dict[str, Any], Path]) -> None:
    report, _ = converted
    reference = report["reference_detection"]
    assert (reference["images"], reference["objects"]) == (8, 6)
    assert reference["map50"] >= 0.9
    fp32 = _rows(report)["openvino/fp32"]
    assert fp32["detection"]["map50"] >= 0.9
    assert fp32["detection"]["per_class"]["face"] == fp32["detection"]["map50"]


def test_int8_drop_is_the_map_it_lost_and_feeds_the_flag(converted: tuple[dict[str, Any], Path]) -> None:
    report, _ = converted
    reference = report["reference_detection"]["map50"]
    for variant_id in ("openvino/fp16", "openvino/int8"):
        row = _rows(report)[variant_id]
        assert row["status"] == "ok"
        assert row["drop"]["metric"] == "mAP@0.5 lost, in points"
        assert row["drop"]["points"] == pytest.approx(100 * (reference - row["detection"]["map50"]))
        assert row["flagged"] is (row["drop"]["points"] > report["drop_threshold"])


def test_report_and_manifest_show_the_map(converted: tuple[dict[str, Any], Path]) -> None:
    report, out_dir = converted
    markdown = (out_dir / "report.md").read_text(encoding="utf-8")
    header = next(line for line in markdown.splitlines() if line.startswith("| Variant |"))
    column = header.split(" | ").index("mAP@0.5 %")
    int8_line = next(line for line in markdown.splitlines() if line.startswith("| `openvino/int8` |"))
    int8_map = _rows(report)["openvino/int8"]["detection"]["map50"]
    assert int8_line.split(" | ")[column] == f"{100 * int8_map:.2f}"
    assert "Reference mAP@0.5: " in markdown and "8 images with 6 annotated boxes" in markdown
    manifest = open_package(out_dir).manifest
    assert manifest.variants["openvino/int8"].accuracy["map50"] == pytest.approx(int8_map, abs=1e-6)
    assert manifest.decoder is not None and manifest.decoder.name == "ssd_anchors"


def _coco_map50(annotations: Path, results: list[dict[str, Any]]) -> float:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO(str(annotations))
        for entry in truth.dataset["annotations"]:
            entry["area"] = entry["bbox"][2] * entry["bbox"][3]
        truth.createIndex()
        evaluation = COCOeval(truth, truth.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return float(evaluation.stats[1])  # AP at IoU 0.5, all areas, 100 detections


@pytest.mark.parametrize("variant_id", ["openvino/fp32", "openvino/int8"])
def test_map_equals_the_daemon_path_scored_by_pycocotools(
    converted: tuple[dict[str, Any], Path], annotated_faces: AnnotatedImages, variant_id: str
) -> None:
    """The package's variant loaded, preprocessed and decoded as the daemon does, scored by pycocotools."""
    report, out_dir = converted
    package = open_package(out_dir)
    manifest = package.manifest
    assert manifest.decoder is not None
    model = load_model(package, variant_id, "openvino", {"device": "CPU"})
    decoder = make_decoder(manifest.decoder.name, manifest.decoder.params, manifest.labels)
    preprocess = ImagePreprocessor(manifest.inputs[0], model.inputs[0])
    results: list[dict[str, Any]] = []
    try:
        for image in annotated_faces.coco["images"]:
            tensor, transform = preprocess(cv2.imread(str(annotated_faces.folder / image["file_name"])))
            decoded = decoder.decode(model.infer([tensor]), model.outputs, transform)
            assert isinstance(decoded, Detections)
            for d in decoded.detections:
                x0, y0, x1, y1 = d.box
                box = {"bbox": [x0, y0, x1 - x0, y1 - y0], "score": d.score, "category_id": 1}
                results.append({"image_id": image["id"], **box})
    finally:
        model.close()
    assert results, "the detector found nothing; there is nothing to compare"
    reported = _rows(report)[variant_id]["detection"]["map50"]
    assert reported == pytest.approx(_coco_map50(annotated_faces.annotations, results), abs=1e-9)


def test_shifted_boxes_score_lower(annotated_faces: AnnotatedImages, tmp_path: Path) -> None:
    """Boxes a face's width off the faces are misses: the figure depends on where the boxes are, not on how many."""
    coco = json.loads(json.dumps(annotated_faces.coco))
    for entry in coco["annotations"][:3]:
        entry["bbox"][0] += entry["bbox"][2]
    annotations = tmp_path / "shifted.json"
    annotations.write_text(json.dumps(coco), encoding="utf-8")
    options = face_detection_options(
        tmp_path / "out", annotated_faces, annotations=annotations, variants=("openvino/fp32",)
    )
    report = convert(options)
    assert report.reference_detection is not None
    # half the faces can still be found, so recall stops at 0.5: at most 51 of the 101 recall points score
    assert 0 < report.reference_detection.map50 <= 51 / 101 + 1e-9
