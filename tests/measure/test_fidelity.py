from __future__ import annotations

from pathlib import Path

import pytest

from edge_runtime.errors import ConfigError, FidelityError
from edge_runtime.measure.fidelity import compare, synthetic_frames
from edge_runtime.package.loader import open_package
from edge_runtime.placement.model import load_model

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "models"


def test_same_model_on_another_backend_passes(face_package_dir: Path) -> None:
    package = open_package(face_package_dir)
    reference = load_model(package, "tflite/fp32", "litert", {"precision": "fp32"})
    candidate = load_model(package, "openvino/fp32", "openvino")
    report = compare(candidate, reference, samples=4)
    assert report.passed
    assert [o.name for o in report.outputs] == ["regressors", "classificators"]
    assert 0 < report.max_rel_error < 1e-4
    report.raise_if_failed()


def test_bf16_on_a_cpu_that_has_it_is_refused() -> None:
    from edge_runtime.backends.openvino.backend import device_capabilities

    package = open_package(SAMPLES / "pose_detection")
    if "BF16" not in device_capabilities()["CPU"]:
        with pytest.raises(ConfigError, match="cannot run bf16"):
            load_model(package, "tflite/fp32", "openvino", {"precision": "bf16"})
        return
    reference = load_model(package, "tflite/fp32", "litert")
    candidate = load_model(package, "tflite/fp32", "openvino", {"precision": "bf16"})
    report = compare(candidate, reference, samples=4, tolerance=0.02)
    worst = max(o.max_abs_error for o in report.outputs)
    assert candidate.backend.runs_on.precision == "bf16"
    assert worst > 1.0  # tens of units on this detector, against 1e-3 at fp32
    assert not report.passed
    with pytest.raises(FidelityError, match=r"differs from the fp32 reference .* exceeds the tolerance of 2\.00%"):
        report.raise_if_failed()
    default = load_model(package, "tflite/fp32", "openvino")
    assert compare(default, reference, samples=4).max_rel_error < 1e-4


def test_synthetic_frames_are_repeatable_and_varied() -> None:
    first, second = synthetic_frames(2, 32, 48, seed=3)
    assert first.shape == (32, 48, 3) and first.dtype.name == "uint8"
    assert (first != second).any()
    assert (synthetic_frames(1, 32, 48, seed=3)[0] == first).all()
    assert first.std() > 10
