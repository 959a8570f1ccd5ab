"""Accelerators and boards, found from device nodes, sysfs, procfs and the device tree under a root.

Only existence and small text files are read: device nodes are never opened, so detection needs no
permissions beyond listing /dev, works inside a container that was given the devices, and can be
tested against fixture trees where device nodes are plain empty files. Paths in the results are as
seen on the box ("/dev/accel/accel0"), whatever root they were read from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from edge_runtime.hardware.facts import (
    EDGETPU_USB_IDS,
    PCI_VENDORS,
    AccelDevice,
    EdgeTpu,
    JetsonInfo,
    NvidiaGpu,
    RenderNode,
    UsbDevice,
)

DEVICE_NODE_GLOBS = (
    "dev/dri/*",
    "dev/accel/*",
    "dev/apex_*",
    "dev/nvidia*",
    "dev/nvhost-*",
    "dev/nvgpu/*/*",
    "dev/video*",
    "dev/nvmap",
    "dev/vchiq",
    "dev/hailo*",
)
DELEGATE_LIBRARY_GLOBS = {
    "edgetpu": (
        "usr/lib/libedgetpu.so.1",
        "usr/lib/*/libedgetpu.so.1",
        "usr/local/lib/libedgetpu.so.1",
        "lib/*/libedgetpu.so.1",
    ),
}
_NVIDIA_MINOR = re.compile(r"^nvidia(\d+)$")
_DRIVER_VERSION = re.compile(r"\s(\d+\.\d+(?:\.\d+)?)\s")
_L4T_RELEASE = re.compile(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)")


def box_path(root: Path, path: Path) -> str:
    return "/" + path.relative_to(root).as_posix()


def read_text(path: Path) -> str | None:
    """Small sysfs/procfs/device-tree files; device-tree strings are NUL-terminated."""
    try:
        return path.read_bytes().decode("utf-8", errors="replace").replace("\0", "\n").strip()
    except OSError:
        return None


def driver_name(device_dir: Path) -> str | None:
    """sysfs names a device's driver by its `driver` symlink, e.g. .../drivers/intel_vpu."""
    try:
        return (device_dir / "driver").readlink().name
    except OSError:
        return None


def _sorted_by_number(paths: Iterable[Path]) -> list[Path]:
    return sorted(paths, key=lambda p: (len(p.name), p.name))


def read_board_model(root: Path, cpuinfo_model: str | None = None) -> str | None:
    for relative in ("proc/device-tree/model", "sys/firmware/devicetree/base/model"):
        model = read_text(root / relative)
        if model:
            return model.splitlines()[0]
    return cpuinfo_model


def read_dmi_system(root: Path) -> str | None:
    dmi = root / "sys" / "class" / "dmi" / "id"
    parts = [read_text(dmi / name) for name in ("sys_vendor", "product_name")]
    joined = " ".join(part for part in parts if part)
    return joined or None


def find_render_nodes(root: Path) -> tuple[RenderNode, ...]:
    nodes = []
    for node in _sorted_by_number((root / "dev" / "dri").glob("renderD*")):
        device = root / "sys" / "class" / "drm" / node.name / "device"
        vendor_id = read_text(device / "vendor")
        nodes.append(
            RenderNode(
                path=box_path(root, node),
                vendor=PCI_VENDORS.get(vendor_id or "", vendor_id or ""),
                vendor_id=vendor_id,
                device_id=read_text(device / "device"),
                driver=driver_name(device),
            )
        )
    return tuple(nodes)


def find_accel_devices(root: Path) -> tuple[AccelDevice, ...]:
    return tuple(
        AccelDevice(
            path=box_path(root, node),
            driver=driver_name(root / "sys" / "class" / "accel" / node.name / "device"),
        )
        for node in _sorted_by_number((root / "dev" / "accel").glob("accel*"))
    )


def find_usb_devices(root: Path) -> tuple[UsbDevice, ...]:
    devices = []
    for entry in sorted((root / "sys" / "bus" / "usb" / "devices").glob("*")):
        vendor, product = read_text(entry / "idVendor"), read_text(entry / "idProduct")
        if vendor and product:
            devices.append(UsbDevice(location=entry.name, usb_id=f"{vendor.lower()}:{product.lower()}"))
    return tuple(devices)


def find_edgetpus(root: Path, usb_devices: Iterable[UsbDevice]) -> tuple[EdgeTpu, ...]:
    pcie = [EdgeTpu("pcie", box_path(root, n)) for n in _sorted_by_number((root / "dev").glob("apex_*"))]
    usb = [
        EdgeTpu("usb", device.location, firmware_loaded=EDGETPU_USB_IDS[device.usb_id])
        for device in usb_devices
        if device.usb_id in EDGETPU_USB_IDS
    ]
    return tuple(pcie + usb)


def find_nvidia_gpus(root: Path) -> tuple[NvidiaGpu, ...]:
    """GPUs with a /dev/nvidiaN node, described by the driver's /proc information for minor N."""
    described = {}
    for info_file in (root / "proc" / "driver" / "nvidia" / "gpus").glob("*/information"):
        info = _key_values(read_text(info_file) or "")
        minor = info.get("Device Minor", "")
        if minor.isdigit():
            described[int(minor)] = (info.get("Model"), info.get("Bus Location"))
    gpus = []
    for node in (root / "dev").glob("nvidia*"):
        if match := _NVIDIA_MINOR.match(node.name):
            index = int(match.group(1))
            model, bus = described.get(index, (None, None))
            gpus.append(NvidiaGpu(index=index, model=model, bus=bus))
    return tuple(sorted(gpus, key=lambda gpu: gpu.index))


def read_nvidia_driver(root: Path) -> str | None:
    version = read_text(root / "proc" / "driver" / "nvidia" / "version") or ""
    match = _DRIVER_VERSION.search(version.splitlines()[0] if version else "")
    return match.group(1) if match else None


def read_jetson(root: Path) -> JetsonInfo | None:
    release = read_text(root / "etc" / "nv_tegra_release")
    compatible = (read_text(root / "proc" / "device-tree" / "compatible") or "").split()
    socs = [c.split(",", 1)[1] for c in compatible if c.startswith("nvidia,tegra")]
    if release is None and not socs:
        return None
    match = _L4T_RELEASE.search(release or "")
    l4t = f"R{match.group(1)}.{match.group(2)}" if match else None
    return JetsonInfo(l4t_release=l4t, soc=socs[0] if socs else None)


def list_device_nodes(root: Path) -> tuple[str, ...]:
    found = {box_path(root, path) for pattern in DEVICE_NODE_GLOBS for path in root.glob(pattern)}
    return tuple(sorted(found))


def find_delegate_libraries(root: Path) -> dict[str, str]:
    found = {}
    for delegate, patterns in DELEGATE_LIBRARY_GLOBS.items():
        paths = sorted(path for pattern in patterns for path in root.glob(pattern))
        if paths:
            found[delegate] = box_path(root, paths[0])
    return found


def _key_values(text: str) -> dict[str, str]:
    pairs = (line.partition(":") for line in text.splitlines())
    return {key.strip(): value.strip() for key, sep, value in pairs if sep}
