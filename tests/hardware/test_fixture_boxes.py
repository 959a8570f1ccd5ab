"""Detection against fixture trees modelled on real boxes (device nodes are empty files there)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from edge_runtime.errors import ConfigError
from edge_runtime.hardware import EdgeTpu, NvidiaGpu, detect, detect_devices

BOXES = Path(__file__).resolve().parents[1] / "fixtures" / "boxes"


def box(name: str) -> Path:
    return BOXES / name


@pytest.mark.parametrize(
    ("name", "arch", "vendor", "model", "cores", "flags", "absent_flags", "facts"),
    [
        ("raspberry-pi-5", "aarch64", "ARM", "Cortex-A76", (4, 4), {"neon", "asimddp", "dotprod", "fp16"},
         {"i8mm", "sve", "avx2"}, set()),
        ("raspberry-pi-4", "aarch64", "ARM", "Cortex-A72", (4, 4), {"neon"}, {"asimddp", "dotprod"}, set()),
        ("jetson-agx-orin", "aarch64", "ARM", "Cortex-A78AE", (12, 12), {"neon", "dotprod"}, {"sve"}, {"jetson"}),
        ("intel-nuc-core-ultra", "x86_64", "Intel", "Intel(R) Core(TM) Ultra 7 155H", (16, 22),
         {"avx2", "avx_vnni", "fma"}, {"avx512f", "amx"}, {"igpu", "npu"}),
        ("intel-nuc-igpu", "x86_64", "Intel", "11th Gen Intel(R) Core(TM) i5-1135G7 @ 2.40GHz", (4, 8),
         {"avx2", "avx512f", "avx512_vnni"}, {"avx_vnni", "amx"}, {"igpu"}),
        ("nvr-coral-pcie", "x86_64", "Intel", "Intel(R) Celeron(R) J6412 @ 2.00GHz", (4, 4), {"sse4_2"},
         {"avx", "avx2"}, {"igpu", "edgetpu"}),
        ("pi4-coral-usb", "aarch64", "ARM", "Cortex-A72", (4, 4), {"neon"}, set(), {"edgetpu"}),
        ("xeon-nvidia-l4", "x86_64", "Intel", "Intel(R) Xeon(R) w5-2455X", (12, 24),
         {"avx512f", "avx512_vnni", "avx512_bf16", "amx", "amx_int8", "amx_bf16", "amx_tile"}, set(), {"nvidia"}),
        ("ryzen-desktop", "x86_64", "AMD", "AMD Ryzen 5 5600X 6-Core Processor", (6, 12), {"avx2", "fma"},
         {"avx512f"}, set()),
        ("rock-5b", "aarch64", "ARM", "Cortex-A55 + Cortex-A76", (8, 8), {"dotprod"}, set(), set()),
    ],
)  # fmt: skip
def test_cpu_and_facts_of_each_box(
    name: str,
    arch: str,
    vendor: str,
    model: str,
    cores: tuple[int, int],
    flags: set[str],
    absent_flags: set[str],
    facts: set[str],
) -> None:
    hardware = detect_devices(box(name))
    assert hardware.cpu.arch == arch
    assert hardware.cpu.vendor == vendor
    assert hardware.cpu.model == model
    assert (hardware.cpu.physical_cores, hardware.cpu.logical_cores) == cores
    assert flags <= hardware.cpu.flags
    assert not absent_flags & hardware.cpu.flags
    assert hardware.facts == facts
    assert json.loads(json.dumps(hardware.to_dict()))["facts"] == sorted(facts)


@pytest.mark.parametrize(
    ("name", "int8_features", "saturates"),
    [
        ("ryzen-desktop", ("x86_64", "avx2"), True),
        ("nvr-coral-pcie", ("x86_64",), True),
        ("intel-nuc-core-ultra", ("x86_64", "avx2", "avx_vnni"), False),
        ("intel-nuc-igpu", ("x86_64", "avx2", "avx512_vnni", "avx512f"), False),
        ("xeon-nvidia-l4", ("x86_64", "amx", "avx2", "avx512_vnni", "avx512f", "avx_vnni"), False),
        ("raspberry-pi-4", ("aarch64", "neon"), False),
        ("raspberry-pi-5", ("aarch64", "dotprod", "neon"), False),
    ],
)
def test_int8_features_name_what_chooses_the_int8_kernels(
    name: str, int8_features: tuple[str, ...], saturates: bool
) -> None:
    cpu = detect_devices(box(name)).cpu
    assert cpu.int8_features == int8_features
    assert cpu.int8_pairs_saturate is saturates


def test_raspberry_pi_5_board_and_its_non_pci_gpu() -> None:
    hardware = detect_devices(box("raspberry-pi-5"))
    assert hardware.board_model == "Raspberry Pi 5 Model B Rev 1.0"
    (node,) = hardware.render_nodes
    assert (node.path, node.vendor, node.vendor_id, node.driver) == ("/dev/dri/renderD128", "", None, "v3d")


def test_board_model_falls_back_to_cpuinfo(tmp_path: Path) -> None:
    root = tmp_path / "pi"
    shutil.copytree(box("raspberry-pi-4"), root, symlinks=True)
    shutil.rmtree(root / "proc" / "device-tree")
    assert detect_devices(root).board_model == "Raspberry Pi 4 Model B Rev 1.4"


def test_jetson_release_and_soc() -> None:
    hardware = detect_devices(box("jetson-agx-orin"))
    assert hardware.board_model == "NVIDIA Jetson AGX Orin Developer Kit"
    assert hardware.jetson is not None
    assert (hardware.jetson.l4t_release, hardware.jetson.soc) == ("R35.4.1", "tegra234")
    assert hardware.nvidia_gpus == ()
    assert "/dev/nvhost-ctrl-gpu" in hardware.device_nodes


def test_core_ultra_npu_and_arc_igpu() -> None:
    hardware = detect_devices(box("intel-nuc-core-ultra"))
    (npu,) = hardware.accel_devices
    assert (npu.path, npu.driver) == ("/dev/accel/accel0", "intel_vpu")
    (gpu,) = hardware.render_nodes
    assert (gpu.vendor, gpu.vendor_id, gpu.device_id, gpu.driver) == ("intel", "0x8086", "0x7d55", "i915")
    assert hardware.system == "ASUSTeK COMPUTER INC. NUC14RVH"
    assert hardware.board_model is None


def test_accel_node_of_another_vendor_is_no_intel_npu(tmp_path: Path) -> None:
    root = tmp_path / "ryzen-ai"
    shutil.copytree(box("ryzen-desktop"), root, symlinks=True)
    (root / "dev" / "accel").mkdir()
    (root / "dev" / "accel" / "accel0").touch()
    device = root / "sys" / "class" / "accel" / "accel0" / "device"
    device.mkdir(parents=True)
    (device / "driver").symlink_to("../../../../bus/pci/drivers/amdxdna")
    hardware = detect_devices(root)
    assert hardware.accel_devices[0].driver == "amdxdna"
    assert "npu" not in hardware.facts


def test_usb_coral_before_and_after_firmware_upload(tmp_path: Path) -> None:
    hardware = detect_devices(box("pi4-coral-usb"))
    assert hardware.edgetpus == (EdgeTpu("usb", "2-1", firmware_loaded=False),)
    assert {"1a6e:089a", "1d6b:0003", "2109:3431"} <= hardware.usb_ids
    assert hardware.delegate_libraries == {"edgetpu": "/usr/lib/aarch64-linux-gnu/libedgetpu.so.1"}

    root = tmp_path / "after"
    shutil.copytree(box("pi4-coral-usb"), root, symlinks=True)
    (root / "sys/bus/usb/devices/2-1/idVendor").write_text("18d1\n")
    (root / "sys/bus/usb/devices/2-1/idProduct").write_text("9302\n")
    assert detect_devices(root).edgetpus == (EdgeTpu("usb", "2-1", firmware_loaded=True),)


def test_pcie_coral() -> None:
    hardware = detect_devices(box("nvr-coral-pcie"))
    assert hardware.edgetpus == (EdgeTpu("pcie", "/dev/apex_0"),)
    assert hardware.delegate_libraries == {}


def test_nvidia_gpu_from_device_node_and_driver_procfs() -> None:
    hardware = detect_devices(box("xeon-nvidia-l4"))
    assert hardware.nvidia_gpus == (NvidiaGpu(index=0, model="NVIDIA L4", bus="0000:17:00.0"),)
    assert hardware.nvidia_driver == "535.183.01"
    assert hardware.render_nodes[0].vendor == "nvidia"
    assert "igpu" not in hardware.facts


def test_nvidia_procfs_without_device_node_is_no_gpu(tmp_path: Path) -> None:
    """A container can see the host's /proc/driver/nvidia without being given /dev/nvidia0."""
    root = tmp_path / "container"
    shutil.copytree(box("xeon-nvidia-l4"), root, symlinks=True)
    (root / "dev" / "nvidia0").unlink()
    hardware = detect_devices(root)
    assert hardware.nvidia_gpus == ()
    assert "nvidia" not in hardware.facts


def test_amd_render_node_is_not_an_intel_gpu() -> None:
    hardware = detect_devices(box("ryzen-desktop"))
    assert [(n.vendor, n.driver) for n in hardware.render_nodes] == [("amd", "amdgpu")]
    assert hardware.facts == frozenset()


RASPBERRY_PI_OS_32BIT_CPUINFO = """\
processor	: 0
model name	: ARMv7 Processor rev 3 (v7l)
BogoMIPS	: 108.00
Features	: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt vfpd32 lpae evtstrm crc32
CPU implementer	: 0x41
CPU architecture: 7
CPU variant	: 0x0
CPU part	: 0xd08
CPU revision	: 3

Hardware	: BCM2711
Revision	: c03114
Model		: Raspberry Pi 4 Model B Rev 1.4
"""


def test_32_bit_arm_userland(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(RASPBERRY_PI_OS_32BIT_CPUINFO)
    hardware = detect_devices(tmp_path)
    assert hardware.cpu.arch == "armv7l"
    assert hardware.cpu.model == "Cortex-A72"
    assert hardware.cpu.flags == {"neon"}
    assert hardware.board_model == "Raspberry Pi 4 Model B Rev 1.4"


def test_empty_root_describes_an_unknown_cpu_without_devices(tmp_path: Path) -> None:
    hardware = detect_devices(tmp_path)
    assert hardware.cpu.arch == "unknown"
    assert hardware.cpu.logical_cores == 1
    assert hardware.facts == frozenset()
    assert hardware.device_nodes == ()


def test_missing_root_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        detect_devices(tmp_path / "nope")


def test_fixture_detection_without_library_probe_records_no_libraries() -> None:
    hardware = detect(box("raspberry-pi-5"), probe_libraries=False)
    assert hardware.libraries == {}
    assert hardware.openvino_devices == ()
