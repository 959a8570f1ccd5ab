from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from edge_runtime.errors import EdgeRuntimeError, ModelIntegrityError
from edge_runtime.package.loader import open_package, sha256_of
from edge_runtime.package.manifest import ModelFormat, Precision


def test_sample_package_opens_and_verifies(face_package_dir: Path) -> None:
    package = open_package(face_package_dir)
    assert package.name == "face_detection_short_range"
    assert set(package.manifest.variants) == {"tflite/fp32", "openvino/fp32"}
    source = package.source("openvino/fp32")
    assert source.path == face_package_dir / "openvino/fp32/model.xml"
    assert source.format is ModelFormat.OPENVINO
    assert source.sha256 == sha256_of(source.path)


def test_changed_file_is_refused(face_package_dir: Path, tmp_path: Path) -> None:
    package_dir = tmp_path / "pkg"
    shutil.copytree(face_package_dir, package_dir)
    weights = package_dir / "openvino/fp32/model.bin"
    data = bytearray(weights.read_bytes())
    data[1000] ^= 0xFF
    weights.write_bytes(bytes(data))
    package = open_package(package_dir)
    with pytest.raises(ModelIntegrityError, match=r"model\.bin has sha256 .* the manifest says"):
        package.source("openvino/fp32")
    package.source("tflite/fp32")  # the untouched variant still loads


def test_missing_file_and_unknown_variant(face_package_dir: Path, tmp_path: Path) -> None:
    package_dir = tmp_path / "pkg"
    shutil.copytree(face_package_dir, package_dir)
    (package_dir / "tflite/fp32/model.tflite").unlink()
    package = open_package(package_dir)
    with pytest.raises(ModelIntegrityError, match=r"model\.tflite is missing"):
        package.source("tflite/fp32")
    with pytest.raises(EdgeRuntimeError, match=r"no variant 'onnx/int8' \(it has: tflite/fp32, openvino/fp32\)"):
        package.source("onnx/int8")


def test_bare_files_get_an_inferred_manifest(face_package_dir: Path, tmp_path: Path) -> None:
    tflite = shutil.copy(face_package_dir / "tflite/fp32/model.tflite", tmp_path / "detector_int8.tflite")
    package = open_package(tflite)
    assert package.bare_file
    assert list(package.manifest.variants) == ["tflite/int8"]
    assert package.manifest.variants["tflite/int8"].precision is Precision.INT8
    assert package.manifest.task.value == "raw"

    xml = open_package(face_package_dir / "openvino/fp32/model.xml")
    variant = xml.manifest.variants["openvino/fp32"]
    assert [f.path for f in variant.files] == ["model.xml", "model.bin"]
    assert xml.source("openvino/fp32").path.name == "model.xml"


def test_not_a_model(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(EdgeRuntimeError, match="neither a model package directory nor a model file"):
        open_package(tmp_path / "notes.txt")
    with pytest.raises(EdgeRuntimeError, match="model not found"):
        open_package(tmp_path / "absent.onnx")
