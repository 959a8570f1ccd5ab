"""Recognising model files, refusing pickles, and clear errors for formats not read."""

from __future__ import annotations

import contextlib
import io
import pickle
import zipfile
from pathlib import Path

import pytest

from converters.cli import main
from converters.errors import ConversionError, VariantSkippedError
from converters.sources import SourceKind, detect_source


def test_supported_formats_are_recognised(tiny_onnx: Path, tiny_openvino: Path, face_package_dir: Path) -> None:
    assert detect_source(tiny_onnx).kind is SourceKind.ONNX
    assert detect_source(tiny_openvino).kind is SourceKind.OPENVINO
    assert detect_source(face_package_dir / "tflite" / "fp32" / "model.tflite").kind is SourceKind.TFLITE


def test_unknown_extension_is_an_error_listing_known_formats(tmp_path: Path) -> None:
    path = tmp_path / "model.caffemodel"
    path.write_bytes(b"\x0a\x03abc")
    with pytest.raises(ConversionError, match=r"model\.caffemodel: unknown model format \.caffemodel.*\.onnx"):
        detect_source(path)


@pytest.mark.parametrize("name", ["model.pkl", "weights.pt", "model.joblib", "disguised.onnx"])
def test_pickles_are_refused_with_why_and_how_to_export(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(pickle.dumps({"weights": [1.0, 2.0]}, protocol=4))
    with pytest.raises(ConversionError) as caught:
        detect_source(path)
    message = str(caught.value)
    assert str(path) in message
    assert "runs arbitrary code" in message
    assert "torch.onnx.export" in message and "TorchScript" in message


def test_torch_save_zip_archives_are_refused_as_pickles(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pth"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("checkpoint/data.pkl", pickle.dumps({"a": 1}))
        archive.writestr("checkpoint/version", "3")
    with pytest.raises(ConversionError, match="is a Python pickle"):
        detect_source(path)


def _ultralytics_checkpoint(path: Path) -> Path:
    """A torch.save zip whose pickle names ultralytics.nn.tasks.DetectionModel (never unpickled by the test)."""
    stream = b"\x80\x02}q\x00X\x05\x00\x00\x00modelq\x01cultralytics.nn.tasks\nDetectionModel\nq\x02s."
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{path.stem}/data.pkl", stream)
        archive.writestr(f"{path.stem}/version", "3")
    return path


def test_an_ultralytics_checkpoint_is_refused_with_the_export_command(tmp_path: Path) -> None:
    checkpoint = _ultralytics_checkpoint(tmp_path / "best.pt")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        assert main([str(checkpoint), "-o", str(tmp_path / "pkg")]) == 2
    assert "Traceback" not in stderr.getvalue()
    message = stderr.getvalue()
    assert f"yolo export model={checkpoint} format=onnx" in message
    assert f"edge-convert {tmp_path / 'best.onnx'} -o PACKAGE" in message and "runs arbitrary code" in message


def test_an_ultralytics_pickle_outside_a_zip_is_recognised_too(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    path.write_bytes(b"\x80\x02cultralytics.nn.tasks\nDetectionModel\nq\x00.")
    with pytest.raises(ConversionError, match=r"yolo export model=\S*last\.pt format=onnx"):
        detect_source(path)


def test_other_pickles_keep_the_general_advice_without_yolo(tmp_path: Path) -> None:
    path = tmp_path / "weights.pt"
    path.write_bytes(pickle.dumps({"weights": [1.0]}, protocol=4))
    with pytest.raises(ConversionError) as caught:
        detect_source(path)
    assert "torch.onnx.export" in str(caught.value) and "yolo export" not in str(caught.value)


def test_torchscript_archives_are_recognised_by_their_code_folder(tmp_path: Path) -> None:
    path = tmp_path / "scripted.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("scripted/code/__torch__.py", "def forward(self, x): return x")
        archive.writestr("scripted/constants.pkl", pickle.dumps(()))
    source = detect_source(path)
    assert source.kind is SourceKind.TORCHSCRIPT
    with pytest.raises(ConversionError, match="must first be exported to ONNX"):
        source.onnx_file()


def test_pt2_files_that_are_not_torch_export_archives_are_refused(tmp_path: Path) -> None:
    pickled = tmp_path / "pickled.pt2"
    pickled.write_bytes(pickle.dumps({"weights": [1.0]}, protocol=4))
    with pytest.raises(ConversionError, match=r"pickled\.pt2 is a Python pickle"):
        detect_source(pickled)
    other = tmp_path / "other.pt2"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("other/archive_format", "not pt2")
    with pytest.raises(ConversionError, match=r"other\.pt2 is not a torch\.export archive"):
        detect_source(other)


def test_missing_file_and_missing_ir_weights_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="model not found"):
        detect_source(tmp_path / "absent.onnx")
    xml = tmp_path / "model.xml"
    xml.write_text("<?xml version='1.0'?><net/>")
    with pytest.raises(ConversionError, match=r"weights model\.bin are missing"):
        detect_source(xml)


def test_folders_other_than_a_saved_model_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match=r"directory without saved_model\.pb"):
        detect_source(tmp_path)
    (tmp_path / "saved_model.pb").write_bytes(b"")
    assert detect_source(tmp_path).kind is SourceKind.SAVED_MODEL


def test_onnx_from_tflite_or_openvino_is_skipped_with_a_reason(face_package_dir: Path, tiny_openvino: Path) -> None:
    with pytest.raises(VariantSkippedError, match="tf2onnx"):
        detect_source(face_package_dir / "tflite" / "fp32" / "model.tflite").onnx_file()
    with pytest.raises(VariantSkippedError, match="cannot be converted back to ONNX"):
        detect_source(tiny_openvino).onnx_file()


def test_unreadable_model_content_is_a_conversion_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"this is not a protobuf")
    with pytest.raises(ConversionError, match=r"OpenVINO cannot read onnx model .*broken\.onnx"):
        detect_source(path).openvino_model()
