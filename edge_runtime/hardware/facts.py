"""What detection found on a box, as plain frozen records.

Everything here is data read from the filesystem (or reported by a backend library), so a
`Hardware` can be printed as JSON by `probe --json`, compared in tests, and matched against device
profiles without touching the box again. Profiles and backend choices refer to the coarse `facts`
("npu", "igpu", "edgetpu", "nvidia", "jetson") rather than to individual device records, so the
wording of why a fact is missing lives here, next to the code that decides it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from edge_runtime.backends.base import BackendStatus

Fact = Literal["igpu", "npu", "edgetpu", "nvidia", "jetson"]
FACTS: tuple[Fact, ...] = ("igpu", "npu", "edgetpu", "nvidia", "jetson")

FACT_MISSING: dict[Fact, str] = {
    "igpu": "Intel GPU not present (no /dev/dri/renderD* with vendor 0x8086)",
    "npu": "NPU not present (/dev/accel/accel* missing)",
    "edgetpu": "Edge TPU not present (no /dev/apex_*, no USB device 1a6e:089a or 18d1:9302)",
    "nvidia": "NVIDIA GPU not present (/dev/nvidia[0-9]* missing)",
    "jetson": "not a Jetson (no /etc/nv_tegra_release, no nvidia,tegra in the device tree)",
}

PCI_VENDORS = {"0x8086": "intel", "0x10de": "nvidia", "0x1002": "amd", "0x1af4": "virtio", "0x1234": "qemu"}
EDGETPU_USB_IDS = {"1a6e:089a": False, "18d1:9302": True}  # id -> firmware already loaded
NPU_DRIVERS = frozenset({"intel_vpu"})


# The ISA features that decide which int8 kernels a CPU backend runs, and with them which integers come
# out: x86 without VNNI or AMX sums pairs of 8-bit products in 16 bits, which saturates on full-range
# weights (see converters.context.QuantizationSettings); ARM's dot-product and i8mm kernels, like VNNI
# and AMX, accumulate in 32 bits.
INT8_FEATURES = frozenset({"avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx", "neon", "dotprod", "i8mm", "sve"})
INT8_WIDE_ACCUMULATION = frozenset({"avx512_vnni", "avx_vnni", "amx"})


@dataclass(frozen=True)
class CpuInfo:
    arch: str  # normalised machine name: x86_64, aarch64, armv7l, riscv64, ...
    vendor: str
    model: str
    physical_cores: int
    logical_cores: int
    flags: frozenset[str]  # normalised ISA features that matter for inference kernels

    @property
    def int8_features(self) -> tuple[str, ...]:
        """The architecture and the features that choose its int8 kernels, e.g. ('x86_64', 'avx2')."""
        return (self.arch, *sorted(self.flags & INT8_FEATURES))

    @property
    def int8_pairs_saturate(self) -> bool:
        """Whether int8 kernels here add pairs of products in 16 bits (x86 without VNNI or AMX)."""
        return self.arch in ("x86_64", "x86") and not self.flags & INT8_WIDE_ACCUMULATION


@dataclass(frozen=True)
class RenderNode:
    """A DRM render node: what OpenVINO's GPU plugin (Intel) or a vendor runtime opens."""

    path: str
    vendor: str  # "intel", "nvidia", "amd", or the raw PCI id, or "" for non-PCI (e.g. Pi's v3d)
    vendor_id: str | None
    device_id: str | None
    driver: str | None


@dataclass(frozen=True)
class AccelDevice:
    """A compute accelerator node under /dev/accel (Intel NPU with driver intel_vpu)."""

    path: str
    driver: str | None


@dataclass(frozen=True)
class UsbDevice:
    location: str  # sysfs name, e.g. "2-1"
    usb_id: str  # "vvvv:pppp"


@dataclass(frozen=True)
class EdgeTpu:
    kind: Literal["pcie", "usb"]
    location: str  # /dev/apex_N or the USB sysfs name
    firmware_loaded: bool | None = None  # USB only: 18d1:9302 after the runtime uploaded firmware


@dataclass(frozen=True)
class NvidiaGpu:
    index: int
    model: str | None
    bus: str | None = None
    memory_mib: int | None = None


@dataclass(frozen=True)
class JetsonInfo:
    l4t_release: str | None  # e.g. "R35.4.1"
    soc: str | None  # e.g. "tegra234" (Orin)


@dataclass(frozen=True)
class OpenVinoDevice:
    name: str
    full_name: str
    capabilities: tuple[str, ...] = ()  # OPTIMIZATION_CAPABILITIES, e.g. ("FP32", "FP16", "INT8")


@dataclass(frozen=True)
class Hardware:
    root: str
    cpu: CpuInfo
    board_model: str | None = None
    system: str | None = None  # DMI vendor and product name on PCs
    render_nodes: tuple[RenderNode, ...] = ()
    accel_devices: tuple[AccelDevice, ...] = ()
    usb_devices: tuple[UsbDevice, ...] = ()
    edgetpus: tuple[EdgeTpu, ...] = ()
    nvidia_gpus: tuple[NvidiaGpu, ...] = ()
    nvidia_driver: str | None = None
    jetson: JetsonInfo | None = None
    device_nodes: tuple[str, ...] = ()
    delegate_libraries: Mapping[str, str] = field(default_factory=dict)  # "edgetpu" -> library path
    libraries: Mapping[str, BackendStatus] = field(default_factory=dict)
    openvino_devices: tuple[OpenVinoDevice, ...] = ()

    @property
    def facts(self) -> frozenset[Fact]:
        present: set[Fact] = set()
        if any(node.vendor == "intel" for node in self.render_nodes):
            present.add("igpu")
        if any(dev.driver is None or dev.driver in NPU_DRIVERS for dev in self.accel_devices):
            present.add("npu")
        if self.edgetpus:
            present.add("edgetpu")
        if self.nvidia_gpus:
            present.add("nvidia")
        if self.jetson is not None:
            present.add("jetson")
        return frozenset(present)

    @property
    def usb_ids(self) -> frozenset[str]:
        return frozenset(device.usb_id for device in self.usb_devices)

    def openvino_capabilities(self, device: str) -> tuple[str, ...] | None:
        """OPTIMIZATION_CAPABILITIES of an OpenVINO device ("GPU" finds "GPU.0"); None when unknown."""
        for known in self.openvino_devices:
            if known.name == device or known.name.split(".")[0] == device:
                return known.capabilities or None
        return None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cpu"]["flags"] = sorted(self.cpu.flags)
        data["facts"] = sorted(self.facts)
        data["delegate_libraries"] = dict(self.delegate_libraries)
        data["libraries"] = {key: _status_dict(status) for key, status in self.libraries.items()}
        return data


def _status_dict(status: BackendStatus) -> dict[str, Any]:
    data = asdict(status)
    data["devices"] = list(status.devices)
    return data
