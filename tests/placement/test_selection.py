"""Backend choice selection: the profile's choices checked against hardware, libraries and packages.

Hardware comes from the fixture trees of real boxes. Library statuses are what this machine's
libraries really report, or that report with the devices a box we lack would add (an NPU, CUDA, an
Edge TPU): selection only reads a status, so that is all a box without those devices needs.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest

from edge_runtime.backends import load_backend
from edge_runtime.backends.base import BackendStatus
from edge_runtime.errors import ConfigError
from edge_runtime.hardware import Hardware, OpenVinoDevice, detect_devices, probe_backend_libraries
from edge_runtime.package.loader import ModelPackage, open_package
from edge_runtime.package.manifest import ModelFormat, Precision, Variant
from edge_runtime.package.writer import describe_variant, write_package
from edge_runtime.placement.profiles import DeviceProfile, load_profiles, parse_profile
from edge_runtime.placement.selection import (
    STORE_FILE,
    Overrides,
    Selection,
    load_stored_choice,
    model_key,
    select,
    store_choice,
)

BOXES = Path(__file__).resolve().parents[1] / "fixtures" / "boxes"
Statuses = dict[str, BackendStatus]


@pytest.fixture(scope="session")
def statuses() -> Statuses:
    """What the libraries installed here report (CPU only: no NPU, no CUDA, no Edge TPU)."""
    found = probe_backend_libraries()
    assert all(status.available for status in found.values()), found
    return found


@pytest.fixture(scope="session")
def profiles() -> dict[str, DeviceProfile]:
    return {profile.name: profile for profile in load_profiles(include_system=False)}


def box(name: str) -> Hardware:
    return detect_devices(BOXES / name)


def with_devices(status: BackendStatus, names: dict[str, str]) -> BackendStatus:
    return replace(status, devices=(*status.devices, *names), device_names={**status.device_names, **names})


def repackage(source: ModelPackage, root: Path, variants: dict[str, Variant]) -> ModelPackage:
    """The same model with another set of variants; the variants' files must already be under root."""
    fields = source.manifest.model_dump(exclude={"variants", "schema_version"})
    write_package(root, variants, **fields)
    return open_package(root)


@pytest.fixture
def face(face_package_dir: Path) -> ModelPackage:
    return open_package(face_package_dir)


@pytest.fixture
def face_copy(face_package_dir: Path, tmp_path: Path) -> Path:
    root = tmp_path / "face"
    shutil.copytree(face_package_dir, root)
    return root


@pytest.fixture
def face_openvino_only(face: ModelPackage, face_copy: Path) -> ModelPackage:
    ir = ["openvino/fp32/model.xml", "openvino/fp32/model.bin"]
    return repackage(
        face, face_copy, {"openvino/fp32": describe_variant(face_copy, ir, ModelFormat.OPENVINO, Precision.FP32)}
    )


@pytest.fixture
def face_with_edgetpu(face: ModelPackage, face_copy: Path) -> ModelPackage:
    """Adds a variant declared as compiled for the Edge TPU (selection reads only the manifest)."""
    (face_copy / "tflite/edgetpu").mkdir()
    shutil.copy(face_copy / "tflite/fp32/model.tflite", face_copy / "tflite/edgetpu/model_edgetpu.tflite")
    edgetpu = describe_variant(
        face_copy, ["tflite/edgetpu/model_edgetpu.tflite"], ModelFormat.TFLITE, Precision.INT8, target="edgetpu"
    )
    return repackage(face, face_copy, {**face.manifest.variants, "tflite/edgetpu": edgetpu})


@pytest.fixture(scope="session")
def tiny_package(tiny_variant_files: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelPackage:
    """A classifier with onnx/fp32, onnx/int8 (dynamically quantized) and openvino/fp32 variants."""
    root = tmp_path_factory.mktemp("tiny_package") / "package"
    shutil.copytree(tiny_variant_files, root)
    variants = {
        "onnx/int8": describe_variant(root, ["onnx/int8/model.onnx"], ModelFormat.ONNX, Precision.INT8),
        "onnx/fp32": describe_variant(root, ["onnx/fp32/model.onnx"], ModelFormat.ONNX, Precision.FP32),
        "openvino/fp32": describe_variant(
            root, ["openvino/fp32/model.xml", "openvino/fp32/model.bin"], ModelFormat.OPENVINO, Precision.FP32
        ),
    }
    write_package(root, variants, name="tiny", inputs=[{"shape": [1, 3, 32, 32], "layout": "NCHW"}])
    return open_package(root)


def reasons(selection: Selection) -> list[str]:
    return [candidate.reason for candidate in selection.candidates]


def summary(selection: Selection) -> list[tuple[str, str, str | None]]:
    return [(c.choice.label(), c.status, c.variant_id) for c in selection.candidates]


# ------------------------------------------------------------------------------------------- NPU


def test_npu_box_whose_openvino_lacks_the_npu_falls_to_the_cpu(
    face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    selection = select(face, box("intel-nuc-core-ultra"), statuses, profiles["intel-core-ultra-npu"])
    npu, gpu, cpu, ort, litert = selection.candidates
    assert npu.status == "skipped"
    assert npu.reason.startswith("skipped: OpenVINO does not list device NPU (it lists: CPU)")
    assert "/dev/accel is present" in npu.reason
    assert gpu.reason == "skipped: OpenVINO does not list device GPU (it lists: CPU)"
    assert selection.chosen is cpu
    assert (cpu.status, cpu.variant_id) == ("taken", "openvino/fp32")
    assert ort.reason == "skipped: no variant for onnxruntime in package (has: tflite/fp32, openvino/fp32)"
    assert (litert.status, litert.variant_id) == ("runnable", "tflite/fp32")
    assert selection.runnable() == [cpu, litert]


def test_npu_taken_when_openvino_lists_it(
    face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    openvino = with_devices(
        statuses["openvino"], {"GPU.0": "Intel(R) Arc(TM) Graphics (iGPU)", "NPU": "Intel(R) AI Boost"}
    )
    selection = select(
        face, box("intel-nuc-core-ultra"), {**statuses, "openvino": openvino}, profiles["intel-core-ultra-npu"]
    )
    assert summary(selection)[:3] == [
        ("openvino NPU fp16", "taken", "openvino/fp32"),
        ("openvino GPU fp16", "runnable", "openvino/fp32"),
        ("openvino CPU", "runnable", "openvino/fp32"),
    ]
    chosen = selection.chosen
    assert chosen is not None
    assert chosen.reason == "taken: openvino on NPU (Intel(R) AI Boost), variant openvino/fp32"
    assert chosen.device_name == "Intel(R) AI Boost"
    assert chosen.backend_options() == {"device": "NPU", "precision": "fp16", "hint": "latency"}
    assert selection.candidates[1].device_name == "Intel(R) Arc(TM) Graphics (iGPU)"


def test_npu_choice_on_a_box_without_npu(
    face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    openvino = with_devices(statuses["openvino"], {"NPU": "Intel(R) AI Boost"})
    selection = select(
        face, box("intel-nuc-igpu"), {**statuses, "openvino": openvino}, profiles["intel-core-ultra-npu"]
    )
    assert reasons(selection)[0] == "skipped: NPU not present (/dev/accel/accel* missing)"


def test_gpu_without_int8_capability_gets_a_float_variant(tiny_package: ModelPackage, statuses: Statuses) -> None:
    """An HD Graphics 630 lists no INT8 in OPTIMIZATION_CAPABILITIES: its int8 runs no faster than float."""
    gpu = {"name": "gpu", "choices": [{"backend": "openvino", "device": "GPU", "variants": ["onnx/int8", "onnx/fp32"]}]}
    profile = parse_profile(gpu, "test")
    openvino = with_devices(statuses["openvino"], {"GPU.0": "Intel(R) HD Graphics 630 (iGPU)"})
    old_gpu = OpenVinoDevice("GPU.0", "Intel(R) HD Graphics 630 (iGPU)", ("FP32", "BIN", "FP16"))
    hardware = replace(box("intel-nuc-igpu"), openvino_devices=(old_gpu,))
    selection = select(tiny_package, hardware, {**statuses, "openvino": openvino}, profile)
    assert summary(selection) == [("openvino GPU", "taken", "onnx/fp32")]
    assert selection.chosen is not None and selection.chosen.device_name == "Intel(R) HD Graphics 630 (iGPU)"

    xe_gpu = replace(old_gpu, capabilities=("FP32", "BIN", "FP16", "INT8"))
    selection = select(
        tiny_package, replace(hardware, openvino_devices=(xe_gpu,)), {**statuses, "openvino": openvino}, profile
    )
    assert summary(selection) == [("openvino GPU", "taken", "onnx/int8")]

    int8_only = select(tiny_package, hardware, {**statuses, "openvino": openvino}, profile, Overrides(precision="int8"))
    assert reasons(int8_only)[0].endswith("; GPU lacks INT8 in OPTIMIZATION_CAPABILITIES")


# ------------------------------------------------------------------------------------------- CUDA


def test_cuda_profile_without_cuda_provider_falls_to_the_cpu(
    tiny_package: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    selection = select(tiny_package, box("xeon-nvidia-l4"), statuses, profiles["nvidia-dgpu"])
    tensorrt_int8, tensorrt_fp16, cuda, openvino_cpu, ort_cpu, litert = selection.candidates
    missing = "skipped: onnxruntime has no TENSORRT execution provider (it has: CPU)"
    assert tensorrt_int8.reason.startswith(missing)
    assert tensorrt_fp16.reason.startswith(missing)
    assert cuda.reason.startswith("skipped: onnxruntime has no CUDA execution provider (it has: CPU)")
    assert "onnxruntime-gpu" in cuda.reason
    assert (openvino_cpu.status, openvino_cpu.variant_id) == ("taken", "onnx/int8")
    assert (ort_cpu.status, ort_cpu.variant_id) == ("runnable", "onnx/int8")
    assert litert.reason == "skipped: no variant for litert in package (has: onnx/int8, onnx/fp32, openvino/fp32)"


def test_cuda_box_with_tensorrt_takes_int8_engine(
    tiny_package: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    ort = with_devices(statuses["onnxruntime"], {"CUDA": "NVIDIA L4", "TENSORRT": "NVIDIA L4"})
    selection = select(tiny_package, box("xeon-nvidia-l4"), {**statuses, "onnxruntime": ort}, profiles["nvidia-dgpu"])
    assert summary(selection)[:3] == [
        ("onnxruntime TENSORRT", "taken", "onnx/int8"),
        ("onnxruntime TENSORRT fp16", "runnable", "onnx/fp32"),
        ("onnxruntime CUDA", "runnable", "onnx/fp32"),
    ]
    assert selection.candidates[1].backend_options() == {"device": "TENSORRT", "precision": "fp16"}


def test_cuda_provider_on_a_box_without_nvidia_gpu(
    tiny_package: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    ort = with_devices(statuses["onnxruntime"], {"CUDA": "", "TENSORRT": ""})
    selection = select(tiny_package, box("ryzen-desktop"), {**statuses, "onnxruntime": ort}, profiles["nvidia-dgpu"])
    assert reasons(selection)[2] == "skipped: NVIDIA GPU not present (/dev/nvidia[0-9]* missing)"


def test_jetson_without_tensorrt_wheel(
    tiny_package: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    selection = select(tiny_package, box("jetson-agx-orin"), statuses, profiles["jetson-orin"])
    assert [c.status for c in selection.candidates] == ["skipped", "skipped", "skipped", "taken", "skipped"]
    assert selection.candidates[3].variant_id == "onnx/int8"


# ------------------------------------------------------------------------------------------- Coral


def test_coral_usb_without_libedgetpu(
    face_with_edgetpu: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile], tmp_path: Path
) -> None:
    root = tmp_path / "box"
    shutil.copytree(BOXES / "pi4-coral-usb", root, symlinks=True)
    (root / "usr/lib/aarch64-linux-gnu/libedgetpu.so.1").unlink()
    litert = replace(statuses["litert"], reason="Edge TPU found but libedgetpu.so.1: cannot open shared object file")
    selection = select(face_with_edgetpu, detect_devices(root), {**statuses, "litert": litert}, profiles["coral-usb"])
    edgetpu, cpu = selection.candidates[:2]
    assert edgetpu.reason == (
        "skipped: Edge TPU delegate not usable by litert: libedgetpu.so.1 not found (install libedgetpu1-std) "
        "(Edge TPU found but libedgetpu.so.1: cannot open shared object file); litert lists: cpu"
    )
    assert (cpu.status, cpu.variant_id) == ("taken", "tflite/fp32")


def test_coral_usb_with_libedgetpu_takes_the_compiled_variant(
    face_with_edgetpu: ModelPackage, face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    litert = with_devices(statuses["litert"], {"edgetpu:usb:0": "Coral Edge TPU (USB)"})
    every = {**statuses, "litert": litert}
    selection = select(face_with_edgetpu, box("pi4-coral-usb"), every, profiles["coral-usb"])
    edgetpu, cpu = selection.candidates[:2]
    assert (edgetpu.status, edgetpu.variant_id, edgetpu.device_name) == (
        "taken",
        "tflite/edgetpu",
        "Coral Edge TPU (USB)",
    )
    assert edgetpu.backend_options() == {"device": "CPU", "delegate": "edgetpu", "edgetpu_device": "usb"}
    assert cpu.variant_id == "tflite/fp32"  # the CPU never gets the Edge TPU-compiled file

    selection = select(face, box("pi4-coral-usb"), every, profiles["coral-usb"])
    assert reasons(selection)[0] == (
        "skipped: no Edge TPU-compiled variant in package (has: tflite/fp32, openvino/fp32)"
    )


def test_pcie_coral_needs_a_pci_edgetpu(
    face_with_edgetpu: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    usb_only = with_devices(statuses["litert"], {"edgetpu:usb:0": "Coral Edge TPU (USB)"})
    selection = select(
        face_with_edgetpu, box("nvr-coral-pcie"), {**statuses, "litert": usb_only}, profiles["coral-pcie"]
    )
    assert reasons(selection)[0].startswith(
        "skipped: Edge TPU delegate not usable by litert: libedgetpu.so.1 not found"
    )
    pci = with_devices(statuses["litert"], {"edgetpu:pci:0": "Coral Edge TPU (PCIe)"})
    selection = select(face_with_edgetpu, box("nvr-coral-pcie"), {**statuses, "litert": pci}, profiles["coral-pcie"])
    assert summary(selection)[0] == ("litert CPU+edgetpu", "taken", "tflite/edgetpu")


def test_edgetpu_variant_alone_is_no_variant_for_the_cpu(
    face_with_edgetpu: ModelPackage, face_copy: Path, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    only = repackage(face_with_edgetpu, face_copy, {"tflite/edgetpu": face_with_edgetpu.variant("tflite/edgetpu")})
    selection = select(only, box("raspberry-pi-5"), statuses, profiles["raspberry-pi-5"])
    assert reasons(selection)[0] == "skipped: no variant for litert in package (has: tflite/edgetpu)"
    assert selection.chosen is None
    assert "nothing can run this model here" in selection.explain()


# ------------------------------------------------------------------------------------------- libraries and packages


def test_missing_library_is_skipped_with_its_import_error(
    face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    gone = BackendStatus("litert", available=False, reason="No module named 'ai_edge_litert'")
    selection = select(face, box("raspberry-pi-5"), {**statuses, "litert": gone}, profiles["raspberry-pi-5"])
    litert, ort, openvino = selection.candidates
    assert litert.reason == "skipped: library litert not importable: No module named 'ai_edge_litert'"
    assert ort.reason == "skipped: no variant for onnxruntime in package (has: tflite/fp32, openvino/fp32)"
    assert (openvino.status, openvino.variant_id) == ("taken", "openvino/fp32")
    assert openvino.backend_options() == {"device": "CPU", "threads": 4}


def test_package_without_a_variant_for_the_profile_backends(
    face_openvino_only: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    selection = select(face_openvino_only, box("raspberry-pi-5"), statuses, profiles["raspberry-pi-5"])
    assert reasons(selection)[0] == "skipped: no variant for litert in package (has: openvino/fp32)"
    assert summary(selection)[2] == ("openvino CPU", "taken", "openvino/fp32")


def test_unprobed_library(face: ModelPackage, profiles: dict[str, DeviceProfile]) -> None:
    selection = select(face, box("raspberry-pi-5"), {}, profiles["raspberry-pi-5"])
    assert reasons(selection)[0] == "skipped: library litert was not probed"
    assert selection.chosen is None


def test_statuses_default_to_those_detection_recorded(
    face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    hardware = replace(box("ryzen-desktop"), libraries=statuses)
    assert summary(select(face, hardware, profile=profiles["generic-x86-cpu"]))[0] == (
        "openvino CPU",
        "taken",
        "openvino/fp32",
    )


# ------------------------------------------------------------------------------------------- fallback


def test_fallback_to_any_cpu_backend_when_the_profile_has_nothing_runnable(
    face: ModelPackage, statuses: Statuses
) -> None:
    npu_only = parse_profile(
        {"name": "npu-only", "choices": [{"backend": "openvino", "device": "NPU", "requires": "npu"}]}, "test"
    )
    selection = select(face, box("ryzen-desktop"), statuses, npu_only)
    assert summary(selection) == [
        ("openvino NPU", "skipped", None),
        ("openvino CPU", "taken", "openvino/fp32"),
        ("onnxruntime CPU", "skipped", None),
        ("litert CPU", "runnable", "tflite/fp32"),
    ]
    assert [c.origin for c in selection.candidates] == ["profile", "fallback", "fallback", "fallback"]
    cpu_name = statuses["openvino"].device_names["CPU"]
    assert reasons(selection)[1] == (
        "taken as fallback (nothing in profile npu-only is runnable): "
        f"openvino on CPU ({cpu_name}), variant openvino/fp32"
    )


def test_fallback_without_any_profile(face: ModelPackage, statuses: Statuses) -> None:
    selection = select(face, box("ryzen-desktop"), statuses, profile=None)
    assert selection.profile is None
    chosen = selection.chosen
    assert chosen is not None and chosen.origin == "fallback"
    assert "nothing in profile (none) is runnable" in chosen.reason


def test_fallback_prefers_fp32_variants_in_the_backends_own_format(
    tiny_package: ModelPackage, statuses: Statuses
) -> None:
    """The package lists onnx/int8 first; the fallback takes fp32, OpenVINO its own IR."""
    selection = select(tiny_package, box("ryzen-desktop"), statuses, profile=None)
    assert summary(selection)[:2] == [
        ("openvino CPU", "taken", "openvino/fp32"),
        ("onnxruntime CPU", "runnable", "onnx/fp32"),
    ]


# ------------------------------------------------------------------------------------------- overrides


def test_backend_override_narrows_the_profile(
    face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    selection = select(face, box("ryzen-desktop"), statuses, profiles["generic-x86-cpu"], Overrides(backend="litert"))
    assert summary(selection) == [
        ("openvino CPU", "skipped", None),
        ("onnxruntime CPU", "skipped", None),
        ("litert CPU+xnnpack", "taken", "tflite/fp32"),
    ]
    assert reasons(selection)[0] == "skipped: not requested (--backend litert)"


def test_override_outside_the_profile_is_tried_as_asked(
    face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    selection = select(face, box("jetson-agx-orin"), statuses, profiles["jetson-orin"], Overrides(backend="openvino"))
    last = selection.candidates[-1]
    assert (last.origin, last.status, last.variant_id) == ("override", "taken", "openvino/fp32")
    assert last.reason.startswith("taken (as requested): openvino on CPU")


def test_device_override_for_a_device_that_is_missing_does_not_fall_back(
    face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    selection = select(
        face, box("intel-nuc-core-ultra"), statuses, profiles["intel-core-ultra-npu"], Overrides(device="NPU")
    )
    assert selection.chosen is None
    assert all(c.choice.device == "NPU" or c.reason.startswith("skipped: not requested") for c in selection.candidates)


def test_precision_and_variant_overrides(
    tiny_package: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    generic = profiles["generic-x86-cpu"]
    fp32 = select(tiny_package, box("ryzen-desktop"), statuses, generic, Overrides(precision="fp32"))
    assert summary(fp32)[0] == ("openvino CPU fp32", "taken", "openvino/fp32")
    pinned = select(
        tiny_package, box("ryzen-desktop"), statuses, generic, Overrides(backend="onnxruntime", variant="onnx/fp32")
    )
    assert summary(pinned)[1] == ("onnxruntime CPU", "taken", "onnx/fp32")
    int8 = select(
        tiny_package, box("ryzen-desktop"), statuses, generic, Overrides(backend="litert", precision=Precision.INT8)
    )
    assert int8.chosen is None
    assert reasons(int8)[2] == "skipped: no variant for litert in package (has: onnx/int8, onnx/fp32, openvino/fp32)"


def test_precision_too_high_for_every_variant(
    face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]
) -> None:
    selection = select(face, box("ryzen-desktop"), statuses, profiles["generic-x86-cpu"], Overrides(precision="int8"))
    assert selection.chosen is None
    assert reasons(selection)[0].startswith("skipped: no variant matching openvino/int8")
    assert "at int8 (a quantized variant)" in reasons(selection)[0]


def test_bad_overrides_are_config_errors(face: ModelPackage, statuses: Statuses) -> None:
    with pytest.raises(ConfigError, match="unknown precision 'fp8'"):
        Overrides(precision="fp8")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="invalid backend override: backend"):
        select(face, box("ryzen-desktop"), statuses, None, Overrides(backend="tensorflow"))
    with pytest.raises(ConfigError, match="litert cannot load onnx models"):
        select(face, box("ryzen-desktop"), statuses, None, Overrides(backend="litert", variant="onnx/fp32"))


# ------------------------------------------------------------------------------------------- stored choice


def test_stored_choice_goes_first_while_runnable(
    face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile], tmp_path: Path
) -> None:
    litert_choice = profiles["generic-x86-cpu"].choices[2]
    key = model_key(face)
    path = store_choice(tmp_path / "state", key, litert_choice, "tflite/fp32", {"fps": 412.5})
    assert path == tmp_path / "state" / STORE_FILE
    stored = load_stored_choice(tmp_path / "state", key)
    assert stored is not None
    assert (stored.variant_id, stored.metrics, stored.choice.delegate) == ("tflite/fp32", {"fps": 412.5}, "xnnpack")
    assert load_stored_choice(tmp_path / "state", "0" * 64) is None
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ConfigError, match=r"cannot store the choice in .*a-file/state.*pass --state-dir"):
        store_choice(tmp_path / "a-file" / "state", key, litert_choice, "tflite/fp32")

    selection = select(face, box("ryzen-desktop"), statuses, profiles["generic-x86-cpu"], stored=stored)
    first = selection.candidates[0]
    assert (first.origin, first.status, first.variant_id) == ("stored", "taken", "tflite/fp32")
    assert first.reason.startswith("taken (stored by bench --select): litert on CPU+xnnpack")
    assert selection.candidates[1].status == "runnable"


def test_stored_choice_no_longer_runnable(
    face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile], tmp_path: Path
) -> None:
    npu = profiles["intel-core-ultra-npu"].choices[0]
    store_choice(tmp_path, model_key(face), npu, "openvino/fp32")
    stored = load_stored_choice(tmp_path, model_key(face))
    selection = select(face, box("intel-nuc-igpu"), statuses, profiles["intel-igpu"], stored=stored)
    assert reasons(selection)[0] == (
        "skipped: stored choice no longer runnable: NPU not present (/dev/accel/accel* missing)"
    )
    assert selection.chosen is not None and selection.chosen.origin == "profile"


def test_store_keeps_other_models_and_replaces_this_one(
    face: ModelPackage, profiles: dict[str, DeviceProfile], tmp_path: Path
) -> None:
    cpu, litert = profiles["generic-x86-cpu"].choices[0], profiles["generic-x86-cpu"].choices[2]
    store_choice(tmp_path, "a" * 64, cpu, "openvino/fp32")
    store_choice(tmp_path, "b" * 64, cpu, "openvino/fp32")
    store_choice(tmp_path, "a" * 64, litert, "tflite/fp32")
    document = json.loads((tmp_path / STORE_FILE).read_text())
    assert document["version"] == 1
    assert document["models"]["a" * 64]["choice"]["backend"] == "litert"
    assert document["models"]["b" * 64]["choice"]["backend"] == "openvino"
    assert sorted(p.name for p in tmp_path.iterdir()) == [STORE_FILE]


def test_corrupt_store(face: ModelPackage, profiles: dict[str, DeviceProfile], tmp_path: Path) -> None:
    (tmp_path / STORE_FILE).write_text('{"version": 1, "models": {')
    with pytest.raises(ConfigError, match=rf"{STORE_FILE} are not valid JSON"):
        load_stored_choice(tmp_path, model_key(face))
    store_choice(tmp_path, model_key(face), profiles["generic-x86-cpu"].choices[0], "openvino/fp32")
    assert load_stored_choice(tmp_path, model_key(face)) is not None

    document = json.loads((tmp_path / STORE_FILE).read_text())
    document["models"][model_key(face)]["choice"]["backend"] = "tensorflow"
    (tmp_path / STORE_FILE).write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=r"choice\.backend: Input should be"):
        load_stored_choice(tmp_path, model_key(face))


def test_model_key_follows_the_files(face: ModelPackage, face_openvino_only: ModelPackage, face_copy: Path) -> None:
    assert model_key(face) == model_key(open_package(face.root))
    assert model_key(face_openvino_only) != model_key(face)
    weights = face_copy / "openvino/fp32/model.bin"
    weights.write_bytes(weights.read_bytes()[::-1])
    ir = ["openvino/fp32/model.xml", "openvino/fp32/model.bin"]
    changed = repackage(
        face, face_copy, {"openvino/fp32": describe_variant(face_copy, ir, ModelFormat.OPENVINO, Precision.FP32)}
    )
    assert model_key(changed) != model_key(face_openvino_only)


# ------------------------------------------------------------------------------------------- end to end


def test_selection_json(face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile]) -> None:
    selection = select(face, box("pi4-coral-usb"), statuses, profiles["coral-usb"])
    document = json.loads(json.dumps(selection.to_dict()))
    assert document["model"] == "face_detection_short_range"
    assert document["profile"] == "coral-usb"
    assert document["chosen"] == 1
    taken = document["candidates"][1]
    assert (taken["backend"], taken["delegate"], taken["variant"], taken["status"]) == (
        "litert",
        "xnnpack",
        "tflite/fp32",
        "taken",
    )
    assert taken["options"] == {"device": "CPU", "delegate": "xnnpack"}


@pytest.mark.parametrize("profile_name", ["generic-x86-cpu", "raspberry-pi-5", "coral-usb"])
def test_every_runnable_candidate_loads_and_runs_the_face_detector(
    face: ModelPackage,
    statuses: Statuses,
    profiles: dict[str, DeviceProfile],
    profile_name: str,
    astronaut_bgr: np.ndarray,
) -> None:
    """The options a profile produces are accepted by the real backend, which then finds the face."""
    hardware = detect_devices("/")
    selection = select(face, hardware, statuses, profiles[profile_name])
    assert selection.runnable()
    rgb = cv2.resize(astronaut_bgr, (128, 128))[:, :, ::-1]
    image = (rgb.astype(np.float32)[None] - 127.5) / 127.5
    for candidate in selection.runnable():
        assert candidate.variant_id is not None
        backend = load_backend(candidate.choice.backend, face.source(candidate.variant_id), candidate.backend_options())
        try:
            regressors, scores = sorted(backend.infer([image]), key=lambda output: -output.shape[-1])
            assert backend.runs_on.backend == candidate.choice.backend
            assert regressors.shape == (1, 896, 16)
            assert 1 / (1 + np.exp(-scores.max())) > 0.8
        finally:
            backend.close()


def test_profile_choice_identical_to_the_stored_one_is_not_listed_twice(
    face: ModelPackage, statuses: Statuses, profiles: dict[str, DeviceProfile], tmp_path: Path
) -> None:
    generic = profiles["generic-x86-cpu"]
    store_choice(tmp_path, model_key(face), generic.choices[0], "openvino/fp32")
    stored = load_stored_choice(tmp_path, model_key(face))
    selection = select(face, box("ryzen-desktop"), statuses, generic, stored=stored)
    assert summary(selection) == [
        ("openvino CPU", "taken", "openvino/fp32"),
        ("openvino CPU", "skipped", "openvino/fp32"),
        ("onnxruntime CPU", "skipped", None),
        ("litert CPU+xnnpack", "runnable", "tflite/fp32"),
    ]
    assert reasons(selection)[1] == "skipped: same as choice 1 above"


@pytest.mark.parametrize(
    ("variant", "asked", "fits"),
    [
        ("fp32", None, True),
        ("int8", None, True),
        ("int8", "int8", True),
        ("fp32", "int8", False),
        ("int8", "fp32", False),
        ("fp16", "fp32", True),
        ("int8", "fp16", True),
        ("fp32", "bf16", True),
    ],
)
def test_precision_asked_is_that_of_the_float_arithmetic(variant: str, asked: str | None, fits: bool) -> None:
    from edge_runtime.placement.variant_pick import precision_fits

    assert precision_fits(Precision(variant), Precision(asked) if asked else None) is fits
