"""The int8 check on this box's CPU: run where the measuring CPU differed, remembered, and honoured by selection."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from converters.evaluate import probe_error
from edge_runtime.hardware.cpu import read_cpu
from edge_runtime.hardware.facts import CpuInfo
from edge_runtime.measure.int8_check import CHECKS_FILE, CHECKS_VERSION, Int8Checks
from edge_runtime.package.loader import ModelPackage, open_package
from edge_runtime.package.manifest import InputSpec, MeasuredOn, ModelFormat, Precision, Task
from edge_runtime.package.writer import describe_variant, write_package
from edge_runtime.placement.loading import look_at_box, select_for
from edge_runtime.placement.model import load_model
from edge_runtime.placement.profiles import Choice

THIS_CPU = read_cpu(Path("/"))
OTHER_FEATURES = ("x86_64", "avx2", "avx512_vnni", "avx512f")
if THIS_CPU.int8_features == OTHER_FEATURES:
    OTHER_FEATURES = ("aarch64", "dotprod", "neon")
CPU_CHOICE = Choice(backend="onnxruntime", device="CPU")


def write_tiny_package(
    root: Path,
    fp32: Path,
    int8: Path,
    measured_on: tuple[str, ...] | None,
    probe: float | None = None,
) -> ModelPackage:
    """The tiny classifier as onnx/fp32 and onnx/int8, its int8 variant measured on `measured_on`."""
    for variant_id, source in (("onnx/fp32", fp32), ("onnx/int8", int8)):
        (root / variant_id).mkdir(parents=True, exist_ok=True)
        shutil.copy(source, root / variant_id / "model.onnx")
    accuracy = {"drop_points": 0.2, "drop_threshold": 1.0} | ({"probe_error": probe} if probe is not None else {})
    machine = MeasuredOn(cpu="workstation", int8_features=measured_on) if measured_on else None
    variants = {
        "onnx/fp32": describe_variant(root, ["onnx/fp32/model.onnx"], ModelFormat.ONNX, Precision.FP32),
        "onnx/int8": describe_variant(
            root, ["onnx/int8/model.onnx"], ModelFormat.ONNX, Precision.INT8, accuracy=accuracy, measured_on=machine
        ),
    }
    spec = InputSpec(shape=(1, 3, 32, 32), layout="NCHW", color_order="RGB", mean=(127.5,), std=(64.0,))
    write_package(root, variants, name="tiny", task=Task.CLASSIFICATION, inputs=(spec,))
    return open_package(root)


def recorded_probe(root: Path, fp32: Path, int8: Path) -> float:
    """What edge-convert records for the variant: its probe figure, measured the converter's way."""
    package = write_tiny_package(root, fp32, int8, measured_on=None)
    model = load_model(package, "onnx/int8", "onnxruntime", {"device": "CPU"})
    try:
        figure = probe_error(package, model)
    finally:
        model.close()
    assert figure is not None
    shutil.rmtree(root)
    return figure


def passes(checks: Int8Checks, package: ModelPackage) -> bool:
    outcome = checks(package, "onnx/int8", CPU_CHOICE)
    assert outcome is not None, "the check did not run"
    return outcome.passed


@pytest.fixture(scope="module")
def broken_int8(tiny_int8_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The int8 classifier with its first convolution filter negated: computes something else on every CPU."""
    model = onnx.load(tiny_int8_onnx)
    for init in model.graph.initializer:
        if init.name == "conv_w_quantized":
            weights = numpy_helper.to_array(init).copy()
            weights[:4] = -weights[:4]
            init.CopyFrom(numpy_helper.from_array(weights, init.name))
    path = tmp_path_factory.mktemp("broken") / "broken_int8.onnx"
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def good_probe(tiny_onnx: Path, tiny_int8_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> float:
    return recorded_probe(tmp_path_factory.mktemp("probe") / "pkg", tiny_onnx, tiny_int8_onnx)


def test_a_variant_measured_on_the_same_int8_features_is_trusted_without_running(
    tiny_onnx: Path, broken_int8: Path, tmp_path: Path
) -> None:
    package = write_tiny_package(tmp_path / "pkg", tiny_onnx, broken_int8, THIS_CPU.int8_features, probe=0.001)
    checks = Int8Checks(tmp_path / "state", THIS_CPU)
    assert checks(package, "onnx/int8", CPU_CHOICE) is None  # not checked
    assert not (tmp_path / "state" / CHECKS_FILE).exists()


def test_a_variant_that_reproduces_its_recorded_figure_here_is_taken_and_remembered(
    tiny_onnx: Path, tiny_int8_onnx: Path, good_probe: float, tmp_path: Path
) -> None:
    package = write_tiny_package(tmp_path / "pkg", tiny_onnx, tiny_int8_onnx, OTHER_FEATURES, good_probe)
    selection = select_for(package, look_at_box(), state_dir=tmp_path / "state")
    assert selection.chosen is not None and selection.chosen.variant_id == "onnx/int8"
    assert f"int8 checked on this CPU ({' '.join(THIS_CPU.int8_features)}): outputs" in selection.chosen.reason
    runnable = [c for c in selection.runnable() if c.variant_id == "onnx/int8"]
    stored = json.loads((tmp_path / "state" / CHECKS_FILE).read_text())["entries"]
    assert len(stored) == len(runnable) >= 2  # OpenVINO and ONNX Runtime on the CPU: one check each
    for entry in stored.values():
        assert entry["variant_id"] == "onnx/int8" and entry["box"] == list(THIS_CPU.int8_features)
        assert entry["mean_error"] == pytest.approx(good_probe, abs=0.005)  # requantization rounding only


def test_a_variant_that_computes_otherwise_here_is_passed_over_with_the_measured_error(
    tiny_onnx: Path, tiny_int8_onnx: Path, broken_int8: Path, good_probe: float, tmp_path: Path
) -> None:
    package = write_tiny_package(tmp_path / "pkg", tiny_onnx, broken_int8, OTHER_FEATURES, good_probe)
    selection = select_for(package, look_at_box(), state_dir=tmp_path / "state")
    chosen = selection.chosen
    assert chosen is not None and chosen.variant_id == "onnx/fp32"
    assert "passed over onnx/int8, which moves its outputs" in chosen.reason
    assert f"where edge-convert measured it ({' '.join(OTHER_FEATURES)})" in chosen.reason
    assert " ".join(THIS_CPU.int8_features) in chosen.reason
    probe = subprocess.run(
        [sys.executable, "-m", "edge_runtime", "probe", "--model", str(tmp_path / "pkg"), "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "passed over onnx/int8, which moves its outputs" in probe.stdout


def test_the_stored_measurement_is_reused_for_this_box_only(
    tiny_onnx: Path, tiny_int8_onnx: Path, good_probe: float, tmp_path: Path
) -> None:
    package = write_tiny_package(tmp_path / "pkg", tiny_onnx, tiny_int8_onnx, OTHER_FEATURES, good_probe)
    state = tmp_path / "state"
    assert passes(Int8Checks(state, THIS_CPU), package)
    store = state / CHECKS_FILE
    data = json.loads(store.read_text())
    (key,) = data["entries"]
    data["entries"][key]["mean_error"] = 0.5  # as if this box had measured a broken variant before
    store.write_text(json.dumps(data))
    refusal = Int8Checks(state, THIS_CPU)(package, "onnx/int8", CPU_CHOICE)
    assert refusal is not None and not refusal.passed
    assert "moves its outputs 50.0% of their range" in refusal.description
    other_box = next(  # int8 features unlike this box's and unlike those the package was measured on
        box
        for flag in ("avx_vnni", "amx")
        if (box := CpuInfo("x86_64", "AMD", "other", 2, 2, THIS_CPU.flags ^ {flag})).int8_features != OTHER_FEATURES
    )
    assert passes(Int8Checks(state, other_box), package)  # measured again, for that box
    assert len(json.loads(store.read_text())["entries"]) == 2


def test_an_unreadable_store_is_measured_again(
    tiny_onnx: Path, tiny_int8_onnx: Path, good_probe: float, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="edge_runtime.measure.store")
    package = write_tiny_package(tmp_path / "pkg", tiny_onnx, tiny_int8_onnx, OTHER_FEATURES, good_probe)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / CHECKS_FILE).write_text("{not json")
    assert passes(Int8Checks(tmp_path / "state", THIS_CPU), package)
    assert "ignoring unreadable int8 checks" in caplog.text
    assert json.loads((tmp_path / "state" / CHECKS_FILE).read_text())["version"] == CHECKS_VERSION


def test_without_a_recorded_figure_the_error_itself_must_stay_within_the_threshold(
    tiny_onnx: Path, tiny_int8_onnx: Path, broken_int8: Path, good_probe: float, tmp_path: Path
) -> None:
    package = write_tiny_package(tmp_path / "pkg", tiny_onnx, tiny_int8_onnx, measured_on=None)
    verdict = Int8Checks(None, THIS_CPU).verdict(package, "onnx/int8", CPU_CHOICE)
    assert verdict is not None and verdict.recorded is None and verdict.allowed == 0.01
    assert verdict.measurement.mean_error == pytest.approx(good_probe, abs=0.005)
    assert verdict.passed  # 7-bit weights: under 1% of the range from fp32 on the probe's inputs, on every CPU
    broken = write_tiny_package(tmp_path / "broken", tiny_onnx, broken_int8, measured_on=None)
    refusal = Int8Checks(None, THIS_CPU)(broken, "onnx/int8", CPU_CHOICE)
    assert refusal is not None and not refusal.passed
    assert "more than its drop threshold of 1%" in refusal.description


def test_only_int8_variants_on_the_cpu_are_checked(tiny_onnx: Path, broken_int8: Path, tmp_path: Path) -> None:
    package = write_tiny_package(tmp_path / "pkg", tiny_onnx, broken_int8, OTHER_FEATURES, probe=0.001)
    checks = Int8Checks(tmp_path / "state", THIS_CPU)
    variants = package.manifest.variants
    assert checks.applies(variants["onnx/int8"], CPU_CHOICE)
    assert not checks.applies(variants["onnx/fp32"], CPU_CHOICE)
    assert not checks.applies(variants["onnx/int8"], Choice(backend="onnxruntime", device="CUDA"))
    assert not checks.applies(variants["onnx/int8"], Choice(backend="openvino", device="NPU"))
    assert checks.applies(variants["onnx/int8"], Choice(backend="openvino", device="cpu"))


def test_the_probe_figure_is_the_same_on_every_run(
    tiny_onnx: Path, tiny_int8_onnx: Path, good_probe: float, tmp_path: Path
) -> None:
    """The probe's inputs are generated from a fixed seed, so a box measures what the workstation measured."""
    assert np.isfinite(good_probe) and good_probe > 0
    assert recorded_probe(tmp_path / "again", tiny_onnx, tiny_int8_onnx) == good_probe
