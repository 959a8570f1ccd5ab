"""PyTorch models named by their factory, exported to ONNX and converted; and the errors for unusable factories."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from converters.cli import build_parser, options_from
from converters.errors import ConversionError
from converters.pipeline import ConvertOptions, convert
from converters.pytorch_source import export_factory, is_factory_spec
from edge_runtime.package.loader import open_package

MODULE = "edge_convert_torch_example"
SOURCE = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        features = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return torch.softmax(self.head(features), dim=1)


def make_net():
    return Net()


def not_a_module():
    return 42


def broken():
    raise RuntimeError("weights file missing")
"""


@pytest.fixture
def factory_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return MODULE


def test_factory_model_is_exported_and_converted(factory_module: str, tmp_path: Path) -> None:
    np.save(tmp_path / "calib.npy", np.random.default_rng(0).normal(size=(24, 3, 16, 16)).astype(np.float32))
    options = options_from(
        build_parser().parse_args(
            [
                f"{factory_module}:make_net",
                *("-o", str(tmp_path / "out"), "--input-shape", "1,3,16,16", "--bench-seconds", "0"),
                *("--calibration", str(tmp_path / "calib.npy"), "--variants", "onnx/fp32,openvino/fp32,onnx/int8"),
            ]
        )
    )
    report = convert(options)
    assert report.source.startswith(f"pytorch {factory_module}:make_net exported by torch 2.")
    assert report.reference.startswith("make_net.onnx on onnxruntime")
    rows = {r.variant_id: r for r in report.variants}
    assert {vid: r.status for vid, r in rows.items()} == dict.fromkeys(rows, "ok"), report.variants
    fp32 = rows["openvino/fp32"].agreement
    assert fp32 is not None and fp32.max_abs_error < 1e-5
    manifest = open_package(tmp_path / "out").manifest
    assert manifest.name == "make_net" and manifest.inputs[0].shape == (1, 3, 16, 16)
    assert manifest.inputs[0].layout == "NCHW"


def test_export_matches_the_module(factory_module: str, tmp_path: Path) -> None:
    import importlib

    import onnxruntime as ort
    import torch

    make_net = importlib.import_module(factory_module).make_net

    source, origin = export_factory(f"{factory_module}:make_net", (2, 3, 8, 8), tmp_path)
    example = np.random.default_rng(1).normal(size=(2, 3, 8, 8)).astype(np.float32)
    session = ort.InferenceSession(str(source.path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: example})[0]
    with torch.no_grad():
        expected = make_net().eval()(torch.from_numpy(example)).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert "max abs diff vs PyTorch" in origin


@pytest.mark.parametrize(
    ("spec", "shape", "message"),
    [
        ("make_net", None, "make_net: a PyTorch model needs --input-shape"),
        ("not_a_module", (1, 3, 8, 8), "not_a_module() returned int, not a torch.nn.Module"),
        ("missing", (1, 3, 8, 8), f"module {MODULE} has no missing"),
        ("broken", (1, 3, 8, 8), "calling broken() failed: RuntimeError: weights file missing"),
        ("make_net", (1, 0, 8, 8), "--input-shape [1, 0, 8, 8]: every dimension must be positive"),
    ],
)
def test_unusable_factories_are_conversion_errors(
    factory_module: str, tmp_path: Path, spec: str, shape: tuple[int, ...] | None, message: str
) -> None:
    with pytest.raises(ConversionError) as caught:
        export_factory(f"{factory_module}:{spec}", shape, tmp_path)
    assert message in str(caught.value)


def test_unknown_module_and_input_shape_for_files(tiny_onnx: Path, tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="cannot import no_such_module_here"):
        export_factory("no_such_module_here:make", (1, 3), tmp_path)
    options = ConvertOptions(model=tiny_onnx, out_dir=tmp_path / "out", input_shape=(1, 3, 32, 32))
    with pytest.raises(ConversionError, match="--input-shape is for PyTorch models"):
        convert(options)
    assert is_factory_spec("torchvision.models:resnet18")
    assert not is_factory_spec(str(tiny_onnx)) and not is_factory_spec("model.onnx")
