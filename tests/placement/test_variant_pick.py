"""Variant picking against what the converter recorded about each variant's accuracy.

The package is a real tiny classifier (ONNX fp32, a dynamically quantized ONNX int8, and OpenVINO IR);
its manifest carries `accuracy` fields as edge-convert writes them, with the drop each test needs.
Hardware comes from a fixture box and library statuses are what this machine's libraries report.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from edge_runtime.backends.base import BackendStatus
from edge_runtime.hardware import Hardware, detect_devices, probe_backend_libraries
from edge_runtime.package.loader import ModelPackage, open_package
from edge_runtime.package.manifest import ModelFormat, Precision
from edge_runtime.package.writer import describe_variant, write_package
from edge_runtime.placement.loading import load_selected, look_at_box, select_for
from edge_runtime.placement.profiles import DeviceProfile, load_profiles, parse_profile
from edge_runtime.placement.selection import Overrides, Selection, load_stored_choice, model_key, select, store_choice

MakePackage = Callable[..., ModelPackage]
BOXES = Path(__file__).resolve().parents[1] / "fixtures" / "boxes"
LOST = "lost 3.2 points of top-1 in conversion (threshold 1.0)"
FLAGGED = {"top1": 0.62, "top1_agreement_vs_fp32": 0.95, "drop_points": 3.2, "drop_threshold": 1.0}
FINE = {"top1": 0.652, "top1_agreement_vs_fp32": 1.0, "drop_points": 0.0, "drop_threshold": 1.0}
FILES = {
    "onnx/int8": (["onnx/int8/model.onnx"], ModelFormat.ONNX, Precision.INT8),
    "onnx/fp32": (["onnx/fp32/model.onnx"], ModelFormat.ONNX, Precision.FP32),
    "openvino/fp32": (["openvino/fp32/model.xml", "openvino/fp32/model.bin"], ModelFormat.OPENVINO, Precision.FP32),
}


@pytest.fixture(scope="session")
def statuses() -> dict[str, BackendStatus]:
    found = probe_backend_libraries()
    assert all(status.available for status in found.values()), found
    return found


@pytest.fixture(scope="session")
def generic() -> DeviceProfile:
    return next(p for p in load_profiles(include_system=False) if p.name == "generic-x86-cpu")


@pytest.fixture
def make_package(tiny_variant_files: Path, tmp_path: Path) -> MakePackage:
    def make(int8: dict[str, float], fp32: dict[str, float] | None = None) -> ModelPackage:
        """The tiny classifier with onnx/int8's accuracy fields as given, the float variants' as `fp32`."""
        root = tmp_path / f"package{len(list(tmp_path.iterdir()))}"
        shutil.copytree(tiny_variant_files, root)
        accuracy = {"onnx/int8": int8, "onnx/fp32": fp32 or FINE, "openvino/fp32": fp32 or FINE}
        variants = {
            vid: describe_variant(root, files, fmt, precision, accuracy=accuracy[vid])
            for vid, (files, fmt, precision) in FILES.items()
        }
        write_package(root, variants, name="tiny", task="classification", inputs=[{"shape": [1, 3, 32, 32]}])
        return open_package(root)

    return make


def ryzen() -> Hardware:
    return detect_devices(BOXES / "ryzen-desktop")


def summary(selection: Selection) -> list[tuple[str, str, str | None]]:
    return [(c.choice.label(), c.status, c.variant_id) for c in selection.candidates]


def int8_then_fp32() -> DeviceProfile:
    choices = [
        {"backend": "onnxruntime", "device": "CPU", "variants": ["onnx/int8"]},
        {"backend": "openvino", "device": "CPU", "variants": ["onnx/fp32"]},
    ]
    return parse_profile({"name": "int8-then-fp32", "choices": choices}, "test")


def test_a_flagged_variant_is_skipped_with_its_drop_and_the_next_choice_is_taken(
    make_package: MakePackage, statuses: dict[str, BackendStatus]
) -> None:
    package = make_package(FLAGGED)
    selection = select(package, ryzen(), statuses, int8_then_fp32())
    assert summary(selection) == [("onnxruntime CPU", "skipped", None), ("openvino CPU", "taken", "onnx/fp32")]
    assert selection.candidates[0].reason == f"skipped: variant onnx/int8 {LOST}"
    assert f"variant onnx/int8 {LOST}" in selection.explain()


def test_within_its_threshold_the_same_drop_is_no_reason_to_skip(
    make_package: MakePackage, statuses: dict[str, BackendStatus]
) -> None:
    package = make_package({**FLAGGED, "drop_threshold": 5.0})
    selection = select(package, ryzen(), statuses, int8_then_fp32())
    assert summary(selection) == [("onnxruntime CPU", "taken", "onnx/int8"), ("openvino CPU", "runnable", "onnx/fp32")]


def test_a_choice_passes_over_a_flagged_variant_to_its_next_pattern(
    make_package: MakePackage, statuses: dict[str, BackendStatus], generic: DeviceProfile
) -> None:
    selection = select(make_package(FLAGGED), ryzen(), statuses, generic)
    assert summary(selection)[:2] == [
        ("openvino CPU", "taken", "openvino/fp32"),
        ("onnxruntime CPU", "runnable", "onnx/fp32"),
    ]
    assert selection.candidates[0].reason.endswith(f", variant openvino/fp32 (passed over onnx/int8, which {LOST})")
    unflagged = select(make_package(FINE), ryzen(), statuses, generic)
    assert summary(unflagged)[:2] == [
        ("openvino CPU", "taken", "onnx/int8"),
        ("onnxruntime CPU", "runnable", "onnx/int8"),
    ]


def select_flagged_naming(
    variant: str,
    make_package: MakePackage,
    statuses: dict[str, BackendStatus],
    generic: DeviceProfile,
    caplog: pytest.LogCaptureFixture,
) -> Selection:
    """Selection for the package whose onnx/int8 lost accuracy, with `variant` named; warnings are captured."""
    with caplog.at_level(logging.WARNING, logger="edge_runtime.placement.selection"):
        return select(make_package(FLAGGED), ryzen(), statuses, generic, Overrides(variant=variant))


def test_a_variant_the_user_names_runs_anyway_with_a_warning(
    make_package: MakePackage,
    statuses: dict[str, BackendStatus],
    generic: DeviceProfile,
    caplog: pytest.LogCaptureFixture,
) -> None:
    selection = select_flagged_naming("onnx/int8", make_package, statuses, generic, caplog)
    chosen = selection.chosen
    assert chosen is not None and chosen.variant_id == "onnx/int8"
    assert chosen.reason.endswith(f"variant onnx/int8 (requested although it {LOST})")
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings == [f"model tiny: running variant onnx/int8 as requested, although it {LOST}"]


def test_naming_another_variant_warns_of_nothing(
    make_package: MakePackage,
    statuses: dict[str, BackendStatus],
    generic: DeviceProfile,
    caplog: pytest.LogCaptureFixture,
) -> None:
    selection = select_flagged_naming("onnx/fp32", make_package, statuses, generic, caplog)
    assert selection.chosen is not None and selection.chosen.variant_id == "onnx/fp32"
    assert not caplog.records


def test_without_a_recorded_threshold_the_converters_default_applies(
    make_package: MakePackage, statuses: dict[str, BackendStatus]
) -> None:
    unrecorded = {key: value for key, value in FLAGGED.items() if key != "drop_threshold"}
    selection = select(make_package(unrecorded), ryzen(), statuses, int8_then_fp32())
    assert selection.candidates[0].reason == (
        "skipped: variant onnx/int8 lost 3.2 points of top-1 in conversion "
        "(threshold 1.0, edge-convert's default: the manifest records none)"
    )
    small = select(make_package({**unrecorded, "drop_points": 0.8}), ryzen(), statuses, int8_then_fp32())
    assert summary(small)[0] == ("onnxruntime CPU", "taken", "onnx/int8")


def test_a_stored_choice_of_a_flagged_variant_is_no_longer_runnable(
    make_package: MakePackage, statuses: dict[str, BackendStatus], generic: DeviceProfile, tmp_path: Path
) -> None:
    package = make_package(FLAGGED)
    store_choice(tmp_path / "state", model_key(package), generic.choices[1], "onnx/int8")
    stored = load_stored_choice(tmp_path / "state", model_key(package))
    selection = select(package, ryzen(), statuses, generic, stored=stored)
    assert selection.candidates[0].reason == f"skipped: stored choice no longer runnable: variant onnx/int8 {LOST}"
    assert selection.chosen is not None and selection.chosen.variant_id == "openvino/fp32"


def test_when_every_variant_is_flagged_only_a_named_one_runs(
    make_package: MakePackage, statuses: dict[str, BackendStatus], generic: DeviceProfile
) -> None:
    package = make_package(FLAGGED, fp32=FLAGGED)
    selection = select(package, ryzen(), statuses, generic)
    assert selection.chosen is None
    assert all("lost 3.2 points" in c.reason or "no variant for litert" in c.reason for c in selection.candidates)
    pinned = select(package, ryzen(), statuses, generic, Overrides(backend="onnxruntime", variant="onnx/fp32"))
    assert pinned.chosen is not None and pinned.chosen.variant_id == "onnx/fp32"


def test_this_box_loads_a_pinned_flagged_variant_and_otherwise_another(
    make_package: MakePackage, caplog: pytest.LogCaptureFixture
) -> None:
    """Through placement, as `bench --variant` and a pipeline's `model.variant` load a model."""
    package = make_package(FLAGGED)
    box = look_at_box()
    model, candidate = load_selected(package, select_for(package, box))
    assert candidate.variant_id != "onnx/int8" and model.variant_id == candidate.variant_id
    model.close()
    with caplog.at_level(logging.WARNING, logger="edge_runtime.placement.selection"):
        model, candidate = load_selected(package, select_for(package, box, Overrides(variant="onnx/int8")))
    assert model.variant_id == "onnx/int8"
    assert any("running variant onnx/int8 as requested" in record.getMessage() for record in caplog.records)
    model.close()
