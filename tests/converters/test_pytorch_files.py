"""PyTorch models given as files: TorchScript archives are exported and converted; pickles and .pt2 are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from converters.errors import ConversionError
from converters.pipeline import ConvertOptions, convert
from converters.pytorch_source import export_torchscript
from converters.sources import detect_source
from edge_runtime.model import load_model
from edge_runtime.package.loader import open_package

SHAPE = (1, 3, 16, 16)


class SmallNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return torch.softmax(self.head(features), dim=1)


@pytest.fixture
def net() -> SmallNet:
    return SmallNet().eval()


def _example() -> np.ndarray:
    return np.random.default_rng(3).normal(size=SHAPE).astype(np.float32)


@pytest.mark.parametrize(("how", "name"), [("script", "scripted.pt"), ("trace", "traced.torchscript")])
def test_torchscript_file_is_exported_converted_and_runs(net: SmallNet, tmp_path: Path, how: str, name: str) -> None:
    example = _example()
    scripted = torch.jit.script(net) if how == "script" else torch.jit.trace(net, torch.from_numpy(example))
    scripted.save(str(tmp_path / name))
    out = tmp_path / "out"
    options = ConvertOptions(
        model=tmp_path / name,
        out_dir=out,
        input_shape=SHAPE,
        variants=("onnx/fp32", "openvino/fp32"),
        bench_seconds=0,
    )
    report = convert(options)
    assert report.source.startswith(f"pytorch TorchScript {tmp_path / name} exported by torch 2.")
    assert {r.variant_id: r.status for r in report.variants} == {"onnx/fp32": "ok", "openvino/fp32": "ok"}
    with torch.no_grad():
        expected = net(torch.from_numpy(example)).numpy()
    package = open_package(out)
    for variant_id, backend in (("onnx/fp32", "onnxruntime"), ("openvino/fp32", "openvino")):
        model = load_model(package, variant_id, backend)
        try:
            got = model.infer([example])[0]
        finally:
            model.close()
        assert got.shape == expected.shape
        assert float(np.max(np.abs(got - expected))) < 1e-3, variant_id


def test_torchscript_without_input_shape_is_a_clear_error(net: SmallNet, tmp_path: Path) -> None:
    path = tmp_path / "scripted.pt"
    torch.jit.script(net).save(str(path))
    options = ConvertOptions(model=path, out_dir=tmp_path / "out", bench_seconds=0)
    with pytest.raises(ConversionError, match=r"scripted\.pt \(TorchScript\): a PyTorch model needs --input-shape"):
        convert(options)


def test_damaged_torchscript_archive_is_a_conversion_error(net: SmallNet, tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "damaged.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("damaged/code/__torch__.py", "this is not TorchScript")
    with pytest.raises(ConversionError, match=r"torch\.jit\.load cannot read .*damaged\.pt"):
        export_torchscript(path, SHAPE, tmp_path)


@pytest.mark.parametrize("what", ["module", "state_dict"])
def test_torch_save_pickles_are_still_refused(net: SmallNet, tmp_path: Path, what: str) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save(net if what == "module" else net.state_dict(), path)
    options = ConvertOptions(model=path, out_dir=tmp_path / "out", input_shape=SHAPE, bench_seconds=0)
    with pytest.raises(ConversionError, match=r"checkpoint\.pt is a Python pickle .* runs arbitrary code"):
        convert(options)


def test_exported_programs_are_refused_because_their_loader_unpickles(net: SmallNet, tmp_path: Path) -> None:
    path = tmp_path / "program.pt2"
    torch.export.save(torch.export.export(net, (torch.from_numpy(_example()),)), str(path))
    with pytest.raises(ConversionError) as caught:
        detect_source(path)
    message = str(caught.value)
    assert "program.pt2 is a torch.export program; refusing to load it" in message
    assert "weights_only=False" in message and "TorchScript" in message
