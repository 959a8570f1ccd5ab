"""Keras and SavedModel sources besides the digits conversion: detection, refusals, skips, Edge TPU and the flags."""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

import numpy as np
import pytest

from converters.cli import build_parser, options_from
from converters.edgetpu import op_summary
from converters.errors import ConversionError
from converters.pipeline import ConvertOptions, convert
from converters.sources import SourceKind, detect_source
from edge_runtime.package.loader import open_package

STAND_IN_COMPILER = """#!/bin/sh
# Stands in for Coral's edgetpu_compiler (x86-64 Debian/Ubuntu only): same arguments, output names and report.
while [ $# -gt 1 ]; do
  case "$1" in --out_dir) out="$2"; shift 2;; *) shift;; esac
done
[ -n "$FAIL" ] && { echo "Model not quantized" >&2; exit 1; }
cp "$1" "$out/model_edgetpu.tflite"
echo "Number of operations that will run on Edge TPU: 4"
echo "Number of operations that will run on CPU: 1"
"""


@pytest.fixture(scope="module")
def small_keras(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An untrained small classifier and 40 calibration inputs for it."""
    from tensorflow import keras

    folder = tmp_path_factory.mktemp("small_keras")
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((6, 6, 1)), keras.layers.Conv2D(4, 3), keras.layers.Flatten(), keras.layers.Dense(3)]
    )
    model.save(folder / "small.keras")
    np.save(folder / "calibration.npy", np.random.default_rng(0).random((40, 6, 6, 1), dtype=np.float32))
    return folder / "small.keras", folder / "calibration.npy"


def test_keras_files_and_saved_model_folders_are_recognised(tmp_path: Path, small_keras: tuple[Path, Path]) -> None:
    assert detect_source(small_keras[0]).kind is SourceKind.KERAS
    (tmp_path / "exported").mkdir()
    (tmp_path / "exported" / "saved_model.pb").write_bytes(b"")
    assert detect_source(tmp_path / "exported").kind is SourceKind.SAVED_MODEL
    with pytest.raises(ConversionError, match="OpenVINO cannot read saved_model model"):
        detect_source(tmp_path / "exported").openvino_model()


def test_broken_keras_files_and_hdf5_are_refused_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "notzip.keras").write_bytes(b"\x89HDF\r\n")
    with pytest.raises(ConversionError, match=r"notzip\.keras is not a Keras archive"):
        detect_source(tmp_path / "notzip.keras")
    with zipfile.ZipFile(tmp_path / "empty.keras", "w") as archive:
        archive.writestr("metadata.json", "{}")
    with pytest.raises(ConversionError, match=r"Keras cannot load .*empty\.keras"):
        detect_source(tmp_path / "empty.keras").openvino_model()
    (tmp_path / "legacy.h5").write_bytes(b"\x89HDF\r\n\x1a\n")
    with pytest.raises(ConversionError, match=r"model\.save\('model\.keras'\)"):
        detect_source(tmp_path / "legacy.h5")


def test_tflite_variants_from_other_formats_are_skipped_with_why(tiny_onnx: Path, tmp_path: Path) -> None:
    options = ConvertOptions(model=tiny_onnx, out_dir=tmp_path / "out", variants=("tflite/fp32",), bench_seconds=0)
    report = convert(options)
    assert report.variants[0].status == "skipped"
    assert "converted from TensorFlow models" in report.variants[0].message
    assert not report.package_written


def test_edgetpu_is_skipped_with_how_to_install_the_compiler(
    small_keras: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    model, calibration = small_keras
    options = ConvertOptions(
        model=model, out_dir=tmp_path / "out", calibration=calibration, variants=("tflite/edgetpu",), bench_seconds=0
    )
    row = convert(options).variants[0]
    assert row.status == "skipped"
    assert "edgetpu_compiler is not on PATH" in row.message and "apt" in row.message and "x86-64" in row.message


def _stand_in_compiler(folder: Path) -> None:
    folder.mkdir()
    script = folder / "edgetpu_compiler"
    script.write_text(STAND_IN_COMPILER)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_compiled_edgetpu_model_is_packaged_for_the_edgetpu_and_not_run_on_the_cpu(
    small_keras: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in_compiler(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    model, calibration = small_keras
    options = ConvertOptions(
        model=model,
        out_dir=tmp_path / "out",
        calibration=calibration,
        variants=("tflite/int8", "tflite/edgetpu"),
        bench_seconds=0,
    )
    rows = {r.variant_id: r for r in convert(options).variants}
    edgetpu = rows["tflite/edgetpu"]
    assert edgetpu.status == "ok" and edgetpu.agreement is None
    assert edgetpu.message.startswith("not measured on this machine:") and "Edge TPU" in edgetpu.message
    assert edgetpu.built is not None and edgetpu.built.notes[0].endswith("4 operations on the Edge TPU, 1 on the CPU")
    variant = open_package(tmp_path / "out").manifest.variants["tflite/edgetpu"]
    assert variant.target == "edgetpu" and variant.files[0].path == "tflite/edgetpu/model_edgetpu.tflite"
    assert rows["tflite/int8"].agreement is not None  # the CPU variant beside it is measured as usual

    monkeypatch.setenv("FAIL", "1")
    options = ConvertOptions(
        model=model, out_dir=tmp_path / "failed", calibration=calibration, variants=("tflite/edgetpu",), bench_seconds=0
    )
    row = convert(options).variants[0]
    assert row.status == "failed" and "exit status 1: Model not quantized" in row.message


def test_full_integer_variants_without_calibration_data_are_skipped(
    small_keras: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in_compiler(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    variants = ("tflite/int8", "tflite/edgetpu", "tflite/dynamic_int8")
    options = ConvertOptions(model=small_keras[0], out_dir=tmp_path / "out", variants=variants, bench_seconds=0)
    rows = convert(options).variants
    assert [(r.status, "--calibration" in r.message) for r in rows[:2]] == [("skipped", True)] * 2
    assert rows[2].status == "ok"  # dynamic range needs no calibration


def test_op_summary_reads_the_compiler_report() -> None:
    report = "Edge TPU Compiler version 16.0\nNumber of operations that will run on Edge TPU: 62\n"
    report += "Number of operations that will run on CPU: 3\n"
    assert op_summary(report) == "62 operations on the Edge TPU, 3 on the CPU"
    assert op_summary("Compilation succeeded") == "operation counts not reported"


def test_pruning_and_tflite_flags_become_options(tmp_path: Path) -> None:
    args = ["m.keras", "-o", str(tmp_path), "--prune", "0.7", "--prune-scope", "per-layer", "--tflite-io", "uint8"]
    options = options_from(build_parser().parse_args([*args, "--train-data", "t.npz", "--epochs", "3"]))
    assert options.prune is not None
    assert (options.prune.target, options.prune.scope, options.prune.epochs) == (0.7, "per-layer", 3)
    assert options.prune.train_data == Path("t.npz")
    assert options.settings.tflite_io == "uint8"
    assert options.variants is None
    with pytest.raises(ConversionError, match="give --prune as well"):
        options_from(build_parser().parse_args(["m.keras", "-o", str(tmp_path), "--epochs", "2"]))
