"""`edge-runtime package make`: an exported model becomes a package with the runtime's own dependencies."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from model_builders import build_tiny_classifier_onnx, convert_to_openvino_ir
from ultralytics_exports import NAMES, build_ultralytics_onnx, ultralytics_metadata, write_openvino_metadata

from edge_runtime.package.loader import open_package
from edge_runtime.package.manifest import Task
from edge_runtime.package.onnx_metadata import read_metadata_props
from edge_runtime.pipeline.preprocess import ImagePreprocessor
from edge_runtime.placement.loading import load_selected, look_at_box, select_for

REPO = Path(__file__).resolve().parents[2]
WORKSTATION_ONLY = ("onnx", "tensorflow", "nncf", "torch", "matplotlib", "keras")


def package_make(*args: str | Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The command as a box runs it, with the converter's toolchain made unimportable."""
    blocked = tmp_path / "blocked-modules"
    for module in WORKSTATION_ONLY:
        (blocked / module).mkdir(parents=True, exist_ok=True)
        (blocked / module / "__init__.py").write_text(f"raise ImportError('{module} is not on this box')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), str(REPO)])}
    command = [sys.executable, "-m", "edge_runtime", "package", "make", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


def test_an_ultralytics_onnx_export_becomes_a_package_that_detects(tmp_path: Path) -> None:
    model = build_ultralytics_onnx(tmp_path / "yolov8n.onnx")
    done = package_make(model, "-o", tmp_path / "pkg", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{tmp_path / 'pkg'}: package yolov8n version 1, task detection, 3 labels, decoder yolo" in done.stdout
    manifest = open_package(tmp_path / "pkg").manifest
    assert manifest.task is Task.DETECTION and manifest.labels == tuple(NAMES.values())
    assert manifest.decoder is not None and manifest.decoder.params["layout"] == "v8"
    [spec] = manifest.inputs
    assert (spec.shape, spec.layout, spec.color_order, spec.resize) == ((1, 3, 64, 64), "NCHW", "RGB", "letterbox")
    assert (spec.std, spec.pad_value) == ((255.0,), (114,))
    [variant] = manifest.variants.values()
    copied = tmp_path / "pkg" / variant.files[0].path
    assert (
        variant.files[0].sha256
        == hashlib.sha256(model.read_bytes()).hexdigest()
        == hashlib.sha256(copied.read_bytes()).hexdigest()
    )

    package = open_package(tmp_path / "pkg")
    loaded, _ = load_selected(package, select_for(package, look_at_box(isolated=True)))
    try:
        frame = cv2.resize(cv2.imread(str(REPO / "samples/images/astronaut.jpg")), (96, 64))
        tensor, _ = ImagePreprocessor(spec, loaded.inputs[0])(frame)
        [output] = loaded.backend.infer([tensor])
        assert output.shape == (1, 7, 64) and np.isfinite(output).all()
    finally:
        loaded.backend.close()


def test_an_ultralytics_openvino_folder_is_packaged_with_its_weights(tmp_path: Path) -> None:
    folder = tmp_path / "yolov8n_openvino_model"
    folder.mkdir()
    convert_to_openvino_ir(build_ultralytics_onnx(tmp_path / "m.onnx", task="classify"), folder / "yolov8n.xml")
    write_openvino_metadata(folder, ultralytics_metadata("classify", [64, 64]))
    done = package_make(folder, "-o", tmp_path / "pkg", "--name", "sorter", "--version", "2.1", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    manifest = yaml.safe_load((tmp_path / "pkg/model.yaml").read_text())
    assert (manifest["name"], manifest["version"], manifest["task"]) == ("sorter", "2.1", "classification")
    assert manifest["decoder"]["name"] == "classification" and manifest["inputs"][0]["resize"] == "crop"
    [variant] = manifest["variants"].values()
    assert [f["path"] for f in variant["files"]] == ["openvino/fp32/model.xml", "openvino/fp32/model.bin"]


def test_a_model_without_metadata_takes_the_users_task_labels_and_decoder(tmp_path: Path) -> None:
    model = build_tiny_classifier_onnx(tmp_path / "plain.onnx")
    assert read_metadata_props(model) == {}
    given = ["--task", "classification", "--labels", "cat,dog,bird", "--decoder", "classification"]
    done = package_make(model, "-o", tmp_path / "pkg", *given, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    manifest = open_package(tmp_path / "pkg").manifest
    assert manifest.labels == ("cat", "dog", "bird") and manifest.decoder is not None and manifest.inputs == ()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--decoder-params", '{"top_k": 1}'], "--decoder-params needs --decoder"),
        (["--decoder", "classification", "--decoder-params", "[1]"], "--decoder-params must be a JSON object"),
        (["--decoder", "nonesuch"], "nonesuch"),
        (["--task", "juggling"], "--task 'juggling' is not a task; choose one of "),
    ],
)
def test_bad_choices_are_one_line_and_status_2(tmp_path: Path, args: list[str], said: str) -> None:
    model = build_tiny_classifier_onnx(tmp_path / "plain.onnx")
    done = package_make(model, "-o", tmp_path / "pkg", *args, tmp_path=tmp_path)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "pkg").exists()


def test_a_full_folder_a_missing_file_and_a_package_are_refused(tmp_path: Path) -> None:
    model = build_tiny_classifier_onnx(tmp_path / "plain.onnx")
    (tmp_path / "full").mkdir()
    (tmp_path / "full/notes.txt").write_text("mine")
    done = package_make(model, "-o", tmp_path / "full", tmp_path=tmp_path)
    assert done.returncode == 2 and "is not empty" in done.stderr
    done = package_make(tmp_path / "gone.onnx", "-o", tmp_path / "pkg", tmp_path=tmp_path)
    assert done.returncode == 2 and "model not found" in done.stderr
    done = package_make(REPO / "samples/models/face_detection_short_range", "-o", tmp_path / "pkg", tmp_path=tmp_path)
    assert done.returncode == 2 and "is a package already" in done.stderr


def test_metadata_props_are_read_as_the_onnx_package_reads_them(tmp_path: Path) -> None:
    import onnx

    model = build_ultralytics_onnx(tmp_path / "m.onnx", task="pose")
    expected = {prop.key: prop.value for prop in onnx.load(str(model)).metadata_props}
    assert read_metadata_props(model) == expected and "kpt_shape" in expected
    (tmp_path / "junk.onnx").write_bytes(b"\xff" * 64)
    with pytest.raises(Exception, match="not an ONNX model"):
        read_metadata_props(tmp_path / "junk.onnx")
