"""`edge-convert` names every optional module a conversion needs and lacks before it starts: exit status 2, one
line, nothing written. A module is made unimportable for the converter's process by a sitecustomize module, as on
a machine where it is not installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from converters.errors import ConversionError
from converters.requirements import Need, check_requirements, needed

REPO = Path(__file__).resolve().parents[2]


def convert_without(modules: list[str], tmp_path: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """`edge-convert ARGS` in a process where `modules` cannot be imported."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    hidden = "".join(f"sys.modules[{name!r}] = None\n" for name in modules)
    (site / "sitecustomize.py").write_text(f"import sys\n\n{hidden}")
    path = os.pathsep.join(filter(None, [str(site), str(REPO), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "converters.cli", *map(str, args), "--quiet"]
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=REPO, env=env, check=False)


def test_a_missing_module_stops_the_conversion_before_anything_is_written(tiny_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "package"
    result = convert_without(["matplotlib"], tmp_path, tiny_onnx, "-o", out)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "edge-convert: error: this conversion needs Python modules that are not installed: "
        "matplotlib (for report.png; extra 'convert'); pip install 'edge-runtime[convert]'"
    ]
    assert not out.exists()


def test_every_missing_module_is_named_at_once(tiny_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "package"
    result = convert_without(["nncf", "onnxruntime", "matplotlib"], tmp_path, tiny_onnx, "-o", out)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert "matplotlib (for report.png; extra 'convert')" in line
    assert "onnxruntime (for the onnx variants; extra 'onnx')" in line
    assert "nncf (for openvino/int8; extra 'convert')" in line
    assert line.endswith("; pip install 'edge-runtime[convert]'")  # the convert extra brings ONNX Runtime too
    assert not out.exists()


def test_a_module_only_variants_left_out_need_is_not_asked_for(tiny_openvino: Path, tmp_path: Path) -> None:
    out = tmp_path / "package"
    args = ("--variants", "openvino/fp32", "--bench-seconds", "0")
    result = convert_without(["nncf", "onnxruntime", "onnx"], tmp_path, tiny_openvino, "-o", out, *args)
    assert result.returncode == 0, result.stderr
    assert (out / "model.yaml").is_file() and (out / "report.png").is_file()


def test_what_each_source_and_variant_needs(tiny_onnx: Path, tmp_path: Path) -> None:
    def modules(model: Path, variants: tuple[str, ...] | None) -> list[str]:
        return [need.module for need in needed(model, variants)]

    assert modules(tiny_onnx, None) == ["openvino", "matplotlib", "onnx", "onnxruntime", "onnx", "nncf"]
    assert modules(tiny_onnx, ("openvino/fp32",)) == ["openvino", "matplotlib", "onnx"]
    factory = Path("my_models.nets:build")
    assert modules(factory, ("openvino/fp32",)) == ["openvino", "matplotlib", "torch", "onnxruntime", "onnx"]
    keras = tmp_path / "model.keras"
    keras.write_bytes(b"")
    with pytest.raises(ConversionError, match="not a Keras archive"):  # the source is read as the conversion would
        needed(keras, None)


def test_extras_outside_convert_are_added_to_the_install_line() -> None:
    needs = [
        Need("edge_runtime_test_absent_a", "pytorch", "PyTorch models"),
        Need("edge_runtime_test_absent_b", "convert", "report.png"),
        Need("edge_runtime_test_absent_c", "openvino", "reading the model"),
        Need("numpy", "convert", "present"),
    ]
    with pytest.raises(ConversionError) as raised:
        check_requirements(needs)
    message = str(raised.value)
    assert message.endswith("; pip install 'edge-runtime[convert,pytorch]'")
    assert "numpy" not in message
    check_requirements([Need("numpy", "convert", "present")])
