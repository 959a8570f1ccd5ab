from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from edge_runtime.decoders import make_decoder
from edge_runtime.errors import ModelIntegrityError, ModelLoadError, ModelMismatchError
from edge_runtime.package.loader import open_package
from edge_runtime.package.manifest import ModelFormat, Precision
from edge_runtime.package.writer import describe_variant, write_package
from edge_runtime.pipeline.preprocess import ImagePreprocessor
from edge_runtime.placement.model import load_model


@pytest.mark.parametrize(
    ("variant", "backend"),
    [("tflite/fp32", "litert"), ("openvino/fp32", "openvino"), ("tflite/fp32", "openvino")],
)
def test_pretrained_face_detector_through_every_backend(
    face_package_dir: Path, astronaut_bgr: np.ndarray, variant: str, backend: str
) -> None:
    package = open_package(face_package_dir)
    model = load_model(package, variant, backend, {"threads": 1})
    manifest = package.manifest
    assert manifest.decoder is not None
    tensor, transform = ImagePreprocessor(model.input_specs[0], model.inputs[0])(astronaut_bgr)
    faces = (
        make_decoder(manifest.decoder.name, manifest.decoder.params, manifest.labels)
        .decode(model.infer([tensor]), model.outputs, transform)
        .detections
    )
    model.close()
    assert [f.label for f in faces] == ["face"]
    x0, y0, x1, y1 = faces[0].box
    assert 165 < x0 < 195 and 70 < y0 < 100 and 260 < x1 < 290 and 160 < y1 < 190
    assert model.backend.runs_on.precision == "fp32"


def test_three_backends_agree_on_one_onnx_model(tiny_onnx: Path, tiny_openvino: Path, rng: np.random.Generator) -> None:
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    results = {}
    for path, backend in ((tiny_onnx, "onnxruntime"), (tiny_onnx, "openvino"), (tiny_openvino, "openvino")):
        package = open_package(path)
        model = load_model(package, next(iter(package.manifest.variants)), backend)
        results[f"{backend}:{path.suffix}"] = model.infer([x])[0]
        model.close()
    reference = results["onnxruntime:.onnx"]
    for output in results.values():
        assert np.allclose(output, reference, atol=1e-5)


def _package_with_inputs(tmp_path: Path, tiny_onnx: Path, **input_fields: object) -> Path:
    root = tmp_path / "pkg"
    root.mkdir()
    shutil.copy(tiny_onnx, root / "model.onnx")
    variant = describe_variant(root, ["model.onnx"], ModelFormat.ONNX, Precision.FP32)
    spec = {"shape": [1, 3, 32, 32], "layout": "NCHW"} | input_fields
    write_package(root, {"onnx/fp32": variant}, name="tiny", inputs=[spec], output_names=["probabilities"])
    return root


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"shape": [1, 3, 64, 64]}, r"inputs\[0\]\.shape is \[1, 3, 64, 64\], the model's input 'image' has shape"),
        ({"name": "pixels"}, r"inputs\[0\]\.name is 'pixels', the model's input is 'image'"),
        ({"dtype": "uint8"}, r"inputs\[0\]\.dtype is uint8, the model's input 'image' is float32"),
    ],
)
def test_model_that_disagrees_with_its_manifest_is_refused(
    tmp_path: Path, tiny_onnx: Path, fields: dict[str, object], message: str
) -> None:
    package = open_package(_package_with_inputs(tmp_path, tiny_onnx, **fields))
    with pytest.raises(ModelMismatchError, match=message):
        load_model(package, "onnx/fp32", "onnxruntime")


def test_wrong_number_of_outputs_is_refused(tmp_path: Path, tiny_onnx: Path) -> None:
    root = _package_with_inputs(tmp_path, tiny_onnx)
    data = yaml.safe_load((root / "model.yaml").read_text())
    data["output_names"] = ["scores", "boxes"]
    (root / "model.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ModelMismatchError, match="the manifest lists 2 outputs, the model file has 1"):
        load_model(open_package(root), "onnx/fp32", "openvino")


def test_corrupt_model_with_matching_checksum_is_a_load_error(tmp_path: Path, tiny_onnx: Path) -> None:
    root = _package_with_inputs(tmp_path, tiny_onnx)
    (root / "model.onnx").write_bytes(b"\x08\x07garbage" * 10)
    with pytest.raises(ModelIntegrityError):
        load_model(open_package(root), "onnx/fp32", "onnxruntime")
    variant = describe_variant(root, ["model.onnx"], ModelFormat.ONNX, Precision.FP32)
    write_package(root, {"onnx/fp32": variant}, name="tiny")
    with pytest.raises(ModelLoadError, match=r"model\.onnx"):
        load_model(open_package(root), "onnx/fp32", "onnxruntime")


def test_bare_file_reads_its_inputs_from_the_model(tiny_onnx: Path) -> None:
    model = load_model(open_package(tiny_onnx), "onnx/fp32", "onnxruntime")
    spec = model.input_specs[0]
    assert spec.name == "image" and spec.shape == (1, 3, 32, 32) and spec.layout == "NCHW"
    model.close()
