from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.loader import open_package
from edge_runtime.placement.loading import load_selected, look_at_box, select_for
from edge_runtime.placement.selection import Overrides


def test_this_box_loads_the_face_detector_on_its_first_choice(face_package_dir: Path) -> None:
    package = open_package(face_package_dir)
    box = look_at_box()
    selection = select_for(package, box)
    model, candidate = load_selected(package, selection)
    assert candidate is selection.chosen
    assert model.backend.runs_on.backend == candidate.choice.backend
    model.close()


def test_a_choice_that_fails_to_load_hands_over_to_the_next(face_package_dir: Path, tmp_path: Path) -> None:
    package_dir = tmp_path / "pkg"
    shutil.copytree(face_package_dir, package_dir)
    (package_dir / "openvino/fp32/model.bin").write_bytes(b"\0" * 64)
    package = open_package(package_dir)
    selection = select_for(package, look_at_box())
    assert selection.chosen is not None and selection.chosen.variant_id == "openvino/fp32"
    model, candidate = load_selected(package, selection)
    assert candidate.variant_id == "tflite/fp32" and model.backend.runs_on.backend == "litert"
    model.close()


def test_nothing_runnable_explains_every_choice(face_package_dir: Path) -> None:
    package = open_package(face_package_dir)
    selection = select_for(package, look_at_box(), Overrides(variant="onnx/int8"))
    with pytest.raises(EdgeRuntimeError, match="nothing can run model face_detection_short_range") as error:
        load_selected(package, selection)
    assert "skipped:" in str(error.value)
