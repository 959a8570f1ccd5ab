"""PyTorch models given as files: TorchScript archives and torch.export programs are exported and converted;
pickles, and .pt2 archives holding anything torch.export.load would unpickle or run, are refused."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from converters.errors import ConversionError
from converters.pipeline import ConvertOptions, convert
from converters.pytorch_source import export_program, export_torchscript, require_operators_only
from converters.sources import SourceKind, detect_source
from edge_runtime.package.loader import open_package
from edge_runtime.placement.model import load_model

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
    _assert_package_agrees_with(net, out, example)


def _assert_package_agrees_with(net: torch.nn.Module, out: Path, example: np.ndarray) -> None:
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


class RunsCodeWhenUnpickled:
    """What a malicious pickle does: unpickling it calls open(marker, "w"), creating the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


@pytest.fixture
def program_file(net: SmallNet, tmp_path: Path) -> Path:
    path = tmp_path / "program.pt2"
    torch.export.save(torch.export.export(net, (torch.from_numpy(_example()),)), str(path))
    return path


def _rewrite(archive_path: Path, edits: dict[str, bytes]) -> Path:
    """A copy of the archive with the entries ending in each key replaced (or added, under the root folder)."""
    with zipfile.ZipFile(archive_path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    root = next(iter(entries)).split("/")[0]
    for suffix, content in edits.items():
        matching = [name for name in entries if name.endswith(suffix)]
        entries[matching[0] if matching else f"{root}/{suffix}"] = content
    edited = archive_path.with_name(f"edited_{archive_path.name}")
    with zipfile.ZipFile(edited, "w", zipfile.ZIP_STORED) as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    return edited


def _entry(archive_path: Path, suffix: str) -> bytes:
    with zipfile.ZipFile(archive_path) as archive:
        return archive.read(next(name for name in archive.namelist() if name.endswith(suffix)))


def test_exported_program_is_converted_at_its_recorded_shape_and_runs(
    net: SmallNet, program_file: Path, tmp_path: Path
) -> None:
    assert detect_source(program_file).kind is SourceKind.EXPORTED_PROGRAM
    out = tmp_path / "out"
    options = ConvertOptions(model=program_file, out_dir=out, variants=("onnx/fp32", "openvino/fp32"), bench_seconds=0)
    report = convert(options)
    assert report.source.startswith(f"pytorch exported program {program_file} exported by torch 2.")
    assert {r.variant_id: r.status for r in report.variants} == {"onnx/fp32": "ok", "openvino/fp32": "ok"}
    _assert_package_agrees_with(net, out, _example())
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ


def test_input_shape_must_match_the_programs_recorded_shape(program_file: Path, tmp_path: Path) -> None:
    with pytest.raises(ConversionError) as caught:
        export_program(program_file, (1, 3, 32, 32), tmp_path)
    assert str(caught.value) == (
        f"--input-shape [1, 3, 32, 32] does not match the input shape [1, 3, 16, 16] recorded in {program_file}"
    )
    source, _ = export_program(program_file, SHAPE, tmp_path)
    assert source.kind is SourceKind.ONNX and source.path.exists()


def test_program_with_two_inputs_is_a_clear_error(tmp_path: Path) -> None:
    class TwoInputs(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x + y

    path = tmp_path / "two.pt2"
    torch.export.save(torch.export.export(TwoInputs(), (torch.ones(2), torch.ones(2))), str(path))
    with pytest.raises(ConversionError, match=r"two\.pt2: the exported program takes 2 inputs \(x, y\)"):
        export_program(path, None, tmp_path)


def test_opaque_constant_is_refused_before_torch_unpickles_it(program_file: Path, tmp_path: Path) -> None:
    marker = tmp_path / "code_ran"
    config = json.loads(_entry(program_file, "_constants_config.json"))
    config["config"]["evil"] = {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True, "tensor_meta": None}
    edited = _rewrite(
        program_file,
        {
            "_constants_config.json": json.dumps(config).encode(),
            "data/constants/opaque_obj_0": pickle.dumps(RunsCodeWhenUnpickled(marker), protocol=2),
        },
    )
    options = ConvertOptions(model=edited, out_dir=tmp_path / "out", bench_seconds=0)
    with pytest.raises(ConversionError) as caught:
        convert(options)
    message = str(caught.value)
    assert f"{edited} is a torch.export program" in message
    assert "data/constants/opaque_obj_0 holds an opaque constant object" in message and "pickle.loads" in message
    assert not marker.exists()
    with contextlib.suppress(Exception):  # torch.export.load itself runs the pickle: never hand it this archive
        torch.export.load(str(edited))
    assert marker.exists()


def test_weight_marked_as_pickled_is_refused(program_file: Path) -> None:
    config = json.loads(_entry(program_file, "_weights_config.json"))
    config["config"]["conv.weight"]["use_pickle"] = True
    edited = _rewrite(program_file, {"_weights_config.json": json.dumps(config).encode()})
    with pytest.raises(ConversionError) as caught:
        detect_source(edited)
    assert "marks conv.weight as pickled" in str(caught.value)
    assert "weights_only=False" in str(caught.value)


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("data/aotinductor/model/model.so", "loads as a shared library"),
        ("data/weights/model.pt", "a state dict saved with torch.save"),
        ("data/constants/custom_obj_0", "TorchScript custom-class constant"),
        ("code/__torch__.py", "not part of a torch.export program"),
    ],
)
def test_archive_entries_torch_would_unpickle_or_run_are_refused(program_file: Path, entry: str, reason: str) -> None:
    edited = _rewrite(program_file, {entry: b"\x80\x02N."})
    with pytest.raises(ConversionError, match=f"its .*{entry} holds .*{reason}.*refusing to load it"):
        detect_source(edited)


def test_example_inputs_are_loaded_weights_only_even_where_torch_falls_back(program_file: Path, tmp_path: Path) -> None:
    marker = tmp_path / "code_ran"
    buffer = tmp_path / "inputs.pt"
    torch.save(((RunsCodeWhenUnpickled(marker),), {}), buffer)
    edited = _rewrite(program_file, {"data/sample_inputs/model.pt": buffer.read_bytes()})
    with pytest.raises(ConversionError, match=r"only loads with weights_only=False .* refusing it"):
        export_program(edited, None, tmp_path)
    assert not marker.exists()
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ


def test_graph_calling_a_non_operator_is_refused_before_it_runs(program_file: Path, tmp_path: Path) -> None:
    graph = _entry(program_file, "models/model.json").decode()
    assert '"torch.ops.aten.relu.default"' in graph
    edited = _rewrite(
        program_file, {"models/model.json": graph.replace("torch.ops.aten.relu.default", "torch.os.system").encode()}
    )
    with pytest.raises(ConversionError, match=r"system"):
        export_program(edited, None, tmp_path)


def test_damaged_program_error_names_the_cause(program_file: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.pt2"
    with zipfile.ZipFile(program_file) as archive, zipfile.ZipFile(damaged, "w") as copy:
        for name in archive.namelist():
            if not name.endswith("data/weights/weight_1"):
                copy.writestr(name, archive.read(name))
    with pytest.raises(
        ConversionError, match=r"torch\.export\.load cannot read .*damaged\.pt2: .*weight_1: file not found"
    ):
        export_program(damaged, None, tmp_path)


def test_operator_check_refuses_any_other_callable_in_the_graph(net: SmallNet, tmp_path: Path) -> None:
    program = torch.export.export(net, (torch.from_numpy(_example()),))
    require_operators_only(program, tmp_path / "program.pt2")
    relu = next(node for node in program.graph.nodes if node.target is torch.ops.aten.relu.default)
    relu.target = os.system
    with pytest.raises(ConversionError, match=r"program\.pt2: graph node relu calls <built-in function system>"):
        require_operators_only(program, tmp_path / "program.pt2")
