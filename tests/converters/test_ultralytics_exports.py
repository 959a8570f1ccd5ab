"""edge-convert reads what Ultralytics writes into its ONNX and OpenVINO exports, and refuses its .pt checkpoints."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from model_builders import convert_to_openvino_ir
from ultralytics_exports import NAMES, build_ultralytics_onnx, ultralytics_metadata, write_openvino_metadata

from converters.cli import main
from converters.errors import ConversionError
from converters.pipeline import ConvertOptions, Inputs, read_inputs
from converters.progress import Warnings
from edge_runtime.backends.base import TensorSpec
from edge_runtime.package.loader import open_package
from edge_runtime.package.manifest import Task
from edge_runtime.pipeline.preprocess import ImagePreprocessor

LABELS = tuple(NAMES.values())


def _read(model: Path, tmp_path: Path, **options: Any) -> tuple[Inputs, Warnings]:
    warnings = Warnings()
    inputs = read_inputs(ConvertOptions(model=model, out_dir=tmp_path / "pkg", **options), warnings, tmp_path)
    return inputs, warnings


def _run(argv: list[str]) -> tuple[int, str]:
    stderr = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
        status = main(argv)
    return status, stderr.getvalue()


@pytest.fixture(scope="module")
def detect_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`edge-convert yolov8n.onnx -o pkg`, with only the benchmark skipped."""
    folder = tmp_path_factory.mktemp("ultralytics_detect")
    model = build_ultralytics_onnx(folder / "yolov8n.onnx", imgsz=(64, 96))
    status, stderr = _run([str(model), "-o", str(folder / "pkg"), "--bench-seconds", "0"])
    assert status == 0, stderr
    return folder / "pkg"


def test_an_onnx_detect_export_alone_gives_a_yolo_package(detect_package: Path) -> None:
    manifest = open_package(detect_package).manifest
    assert manifest.task is Task.DETECTION and manifest.labels == LABELS
    (spec,) = manifest.inputs
    assert spec.shape == (1, 3, 64, 96) and spec.layout == "NCHW" and spec.color_order == "RGB"
    assert (spec.resize, spec.pad_value, spec.mean, spec.std) == ("letterbox", (114,), None, (255.0,))
    assert manifest.decoder is not None and manifest.decoder.name == "yolo"
    assert manifest.decoder.params == {
        "layout": "v8",
        "coordinates": "pixels",
        "min_score": 0.25,
        "iou_threshold": 0.7,
        "max_detections": 300,
    }
    assert manifest.variants  # every variant was built and checked with that input spec


def test_the_package_letterboxes_camera_frames_on_grey(detect_package: Path) -> None:
    (spec,) = open_package(detect_package).manifest.inputs
    preprocess = ImagePreprocessor(spec, TensorSpec("images", spec.shape, "float32"))
    tensor, _ = preprocess(np.zeros((480, 480, 3), np.uint8))  # 64 x 64 of picture in the middle of 64 x 96
    assert np.allclose(tensor[0, :, :, :16], 114 / 255) and np.allclose(tensor[0, :, :, 80:], 114 / 255)
    assert np.allclose(tensor[0, :, :, 16:80], 0.0)


def test_the_users_flags_win_over_the_metadata(tmp_path: Path) -> None:
    model = build_ultralytics_onnx(tmp_path / "best.onnx")
    inputs, _ = _read(model, tmp_path, labels="a,b,c", task="raw")
    fields = inputs.manifest_fields
    assert fields["labels"] == ("a", "b", "c") and fields["task"] is Task.RAW and fields["decoder"] is None
    assert inputs.specs[0].resize == "letterbox"  # the input spec still comes from the export


def test_a_classify_export_is_centre_cropped_without_border(tmp_path: Path) -> None:
    inputs, _ = _read(build_ultralytics_onnx(tmp_path / "cls.onnx", task="classify"), tmp_path)
    fields = inputs.manifest_fields
    assert fields["task"] is Task.CLASSIFICATION and fields["labels"] == LABELS
    assert fields["decoder"].name == "classification" and fields["decoder"].params == {"activation": "none"}
    spec = inputs.specs[0]
    assert (spec.resize, spec.pad_value, spec.color_order, spec.std) == ("crop", None, "RGB", (255.0,))


@pytest.mark.parametrize(("task", "what"), [("segment", "instance masks"), ("pose", "17 keypoints")])
def test_exports_without_a_decoder_are_raw_and_say_so(tmp_path: Path, task: str, what: str) -> None:
    inputs, warnings = _read(build_ultralytics_onnx(tmp_path / f"{task}.onnx", task=task), tmp_path)
    fields = inputs.manifest_fields
    assert fields["task"] is Task.RAW and fields["decoder"] is None and fields["labels"] == LABELS
    assert inputs.specs[0].resize == "letterbox" and inputs.specs[0].pad_value == (114,)
    assert any(what in warning and "no decoder" in warning for warning in warnings.items)


def test_a_dynamic_export_takes_its_input_size_from_imgsz(tmp_path: Path) -> None:
    inputs, _ = _read(build_ultralytics_onnx(tmp_path / "dyn.onnx", imgsz=(64, 96), dynamic=True), tmp_path)
    assert inputs.specs[0].shape == (1, 3, 64, 96)
    assert inputs.manifest_fields["decoder"].name == "yolo"


def test_an_openvino_export_folder_is_read_with_its_metadata_yaml(tmp_path: Path) -> None:
    onnx_file = build_ultralytics_onnx(tmp_path / "yolov8n.onnx", metadata={})
    folder = tmp_path / "yolov8n_openvino_model"
    folder.mkdir()
    convert_to_openvino_ir(onnx_file, folder / "yolov8n.xml")
    write_openvino_metadata(folder, ultralytics_metadata("detect", [64, 64]))
    inputs, _ = _read(folder, tmp_path)
    fields = inputs.manifest_fields
    assert fields["task"] is Task.DETECTION and fields["labels"] == LABELS and fields["decoder"].name == "yolo"
    spec = inputs.specs[0]
    assert (spec.shape, spec.resize, spec.pad_value, spec.color_order) == ((1, 3, 64, 64), "letterbox", (114,), "RGB")
    assert inputs.source.path == folder / "yolov8n.xml"


def test_a_plain_onnx_model_gets_no_hints(tmp_path: Path) -> None:
    inputs, _ = _read(build_ultralytics_onnx(tmp_path / "plain.onnx", metadata={"producer": "me"}), tmp_path)
    assert inputs.manifest_fields["task"] is Task.RAW and inputs.manifest_fields["labels"] == ()
    assert inputs.specs[0].resize == "stretch" and inputs.specs[0].pad_value is None


def _with(key: str, value: Any) -> dict[str, Any]:
    metadata = ultralytics_metadata("detect", [64, 64])
    metadata[key] = value
    return metadata


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("names", "{0: 'person', 1: 'bicycle'", "'names' is not a Python literal"),
        ("names", "__import__('os').getcwd()", "'names' is not a Python literal"),
        ("names", {0: "person", 2: "car"}, "'names' must number its classes 0 to 1"),
        ("names", [1, 2], "'names' is not a dict of class index to name"),
        ("imgsz", "[64, 64, 3]", "'imgsz' is not [height, width]"),
        ("imgsz", [320, 320], "'imgsz' is '[320, 320]' but the model input 'images' has shape [1, 3, 64, 64]"),
        ("stride", "thirty-two", "'stride' is not a Python literal"),
        ("batch", 4, "'batch' is '4' but the model input"),
        ("task", "depth", "'task' is 'depth'; this converter knows detect"),
    ],
)
def test_malformed_metadata_names_the_file_and_key(tmp_path: Path, key: str, value: Any, expected: str) -> None:
    model = build_ultralytics_onnx(tmp_path / "bad.onnx", metadata=_with(key, value))
    status, stderr = _run([str(model), "-o", str(tmp_path / "pkg")])
    assert status == 2
    assert f"{model}: Ultralytics metadata {expected}" in stderr and "Traceback" not in stderr


def test_a_broken_metadata_yaml_names_its_file(tmp_path: Path) -> None:
    onnx_file = build_ultralytics_onnx(tmp_path / "m.onnx", metadata={})
    convert_to_openvino_ir(onnx_file, tmp_path / "m.xml")
    (tmp_path / "metadata.yaml").write_text("names: {0: person\n", encoding="utf-8")
    status, stderr = _run([str(tmp_path / "m.xml"), "-o", str(tmp_path / "pkg")])
    assert status == 2 and f"{tmp_path / 'metadata.yaml'}: cannot read the Ultralytics metadata" in stderr


def test_a_detect_export_whose_output_is_not_the_raw_head_is_refused(tmp_path: Path) -> None:
    model = build_ultralytics_onnx(tmp_path / "nms.onnx", metadata=_with("names", {i: f"c{i}" for i in range(80)}))
    status, stderr = _run([str(model), "-o", str(tmp_path / "pkg")])
    assert status == 2 and "not the raw head [1, 84, anchors]" in stderr and "nms=False" in stderr


def test_the_openvino_folder_needs_exactly_one_model(tmp_path: Path) -> None:
    folder = tmp_path / "two_models"
    folder.mkdir()
    onnx_file = build_ultralytics_onnx(tmp_path / "m.onnx")
    for name in ("a", "b"):
        convert_to_openvino_ir(onnx_file, folder / f"{name}.xml")
    write_openvino_metadata(folder, ultralytics_metadata("detect", [64, 64]))
    with pytest.raises(ConversionError, match=r"is a directory without saved_model\.pb"):
        _read(folder, tmp_path)


def test_a_yolov5_export_names_no_task_and_gets_the_v5_layout(tmp_path: Path) -> None:
    from converters.sources import SourceKind, SourceModel
    from converters.ultralytics_exports import model_hints

    model = build_ultralytics_onnx(tmp_path / "yolov5s.onnx", metadata={"stride": 32, "names": NAMES})
    inputs = [TensorSpec("images", (1, 3, 64, 64), "float32")]
    outputs = [TensorSpec("output0", (1, 25200, 5 + len(NAMES)), "float32")]  # YOLOv5: [1, anchors, 5 + classes]
    hints = model_hints(SourceModel(model, SourceKind.ONNX), inputs, outputs, Warnings())
    assert hints.task is Task.DETECTION and hints.labels == LABELS
    assert hints.decoder is not None and hints.decoder.params["layout"] == "v5"
    assert hints.input_fields["pad_value"] == (114,)
