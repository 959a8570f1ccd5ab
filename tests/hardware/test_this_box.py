"""Detection of the machine the tests run on, and the libraries installed on it."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

from edge_runtime.hardware import NvidiaGpu, detect, detect_devices
from edge_runtime.hardware.cpu import normalise_arch, normalise_flags
from edge_runtime.hardware.detect import merge_nvidia_smi, parse_nvidia_smi
from edge_runtime.hardware.library_probe import encode


def raw_cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def test_detects_this_cpu_and_its_isa_flags() -> None:
    hardware = detect("/", probe_libraries=False)
    assert hardware.cpu.arch == normalise_arch(platform.machine())
    raw = raw_cpu_flags()
    assert hardware.cpu.flags == normalise_flags(raw)
    for flag in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "asimddp", "i8mm"):
        assert (flag in hardware.cpu.flags) == (flag in raw)
    assert hardware.cpu.logical_cores >= hardware.cpu.physical_cores >= 1
    json.dumps(hardware.to_dict())


def test_arch_read_from_a_copy_of_cpuinfo_agrees_with_uname(tmp_path: Path) -> None:
    """Fixture trees have no uname; the architecture they get from cpuinfo must be the kernel's."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_bytes(Path("/proc/cpuinfo").read_bytes())
    copy = detect_devices(tmp_path)
    this = detect_devices("/")
    assert copy.cpu == this.cpu


def test_library_probe_lists_openvino_cpu_with_capabilities() -> None:
    hardware = detect("/")
    assert set(hardware.libraries) == {"openvino", "litert", "onnxruntime"}
    openvino = hardware.libraries["openvino"]
    assert openvino.available, openvino.reason
    assert "CPU" in openvino.devices
    cpu = next(device for device in hardware.openvino_devices if device.name == "CPU")
    assert cpu.full_name == openvino.device_names["CPU"]
    assert "FP32" in cpu.capabilities
    assert hardware.openvino_capabilities("CPU") == cpu.capabilities
    assert hardware.libraries["onnxruntime"].available
    assert "CPU" in hardware.libraries["onnxruntime"].devices
    document = json.loads(json.dumps(hardware.to_dict()))
    assert "CPU" in document["libraries"]["openvino"]["devices"]


def test_detection_imports_no_backend_library() -> None:
    code = (
        "import sys; import edge_runtime.hardware, edge_runtime.placement.profiles, edge_runtime.placement.selection; "
        "from edge_runtime.hardware import detect_devices; detect_devices('/'); "
        "loaded = [m for m in ('openvino', 'onnxruntime', 'ai_edge_litert') if m in sys.modules]; "
        "print(','.join(loaded))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


NVIDIA_SMI_OUTPUT = """\
00000000:17:00.0, NVIDIA L4, 23034
00000000:CA:00.0, NVIDIA L4, 23034
"""


def test_nvidia_smi_rows_join_procfs_gpus_by_bus() -> None:
    rows = parse_nvidia_smi(NVIDIA_SMI_OUTPUT)
    assert rows == [("00000000:17:00.0", "NVIDIA L4", 23034), ("00000000:CA:00.0", "NVIDIA L4", 23034)]
    gpus = (NvidiaGpu(0, "NVIDIA L4", "0000:ca:00.0"), NvidiaGpu(1, None, None))
    merged = merge_nvidia_smi(gpus, rows)
    assert merged[0] == NvidiaGpu(0, "NVIDIA L4", "0000:ca:00.0", memory_mib=23034)
    assert merged[1] == NvidiaGpu(1, "NVIDIA L4", None, memory_mib=23034)


def test_nvidia_smi_garbage_is_ignored() -> None:
    assert parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't communicate with the driver.\n") == []
    assert parse_nvidia_smi("00000000:17:00.0, NVIDIA L4, [N/A]\n") == [("00000000:17:00.0", "NVIDIA L4", None)]


def test_libraries_probed_in_a_child_process_match_and_stay_out_of_this_one() -> None:

    code = (
        "import sys\n"
        "from edge_runtime.hardware import detect\n"
        "from edge_runtime.hardware.library_probe import encode\n"
        "import json\n"
        "box = detect(isolated=True)\n"
        "loaded = [m for m in ('openvino', 'onnxruntime', 'ai_edge_litert') if m in sys.modules]\n"
        "print(json.dumps({'loaded': loaded, 'probed': encode((dict(box.libraries), box.openvino_devices))}))\n"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    report = json.loads(child.stdout)
    assert report["loaded"] == []
    here = detect()
    assert report["probed"] == json.loads(json.dumps(encode((dict(here.libraries), here.openvino_devices))))
    assert report["probed"]["libraries"]["openvino"]["available"] is True
