"""Putting detection together: the filesystem scan, the NVIDIA tool, and the backend libraries' view.

The filesystem scan takes a root so that tests (and `probe --root`) can describe a box that is not
this one. Asking the backend libraries which devices they can open is a separate step: it imports
OpenVINO, LiteRT and ONNX Runtime, takes a moment, and says what is usable rather than what is
plugged in; a box with an NPU but no NPU driver shows the NPU in the scan and not in OpenVINO.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

from edge_runtime.backends.base import BackendStatus
from edge_runtime.errors import ConfigError
from edge_runtime.hardware.cpu import cpuinfo_board_model, read_cpu
from edge_runtime.hardware.devices import (
    find_accel_devices,
    find_delegate_libraries,
    find_edgetpus,
    find_nvidia_gpus,
    find_render_nodes,
    find_usb_devices,
    list_device_nodes,
    read_board_model,
    read_dmi_system,
    read_jetson,
    read_nvidia_driver,
)
from edge_runtime.hardware.facts import Hardware, NvidiaGpu, OpenVinoDevice

NVIDIA_SMI_TIMEOUT_S = 10.0


def detect(root: Path | str = "/", probe_libraries: bool = True, isolated: bool = False) -> Hardware:
    """Everything known about the box: devices from the filesystem, plus what each library can use.

    `isolated` asks the libraries from a child process, so that this process imports none of them.
    """
    hardware = detect_devices(root)
    if not probe_libraries:
        return hardware
    probed = None
    if isolated:
        from edge_runtime.hardware.library_probe import probe_in_child

        probed = probe_in_child()
    if probed is None:
        statuses = probe_backend_libraries()
        probed = (statuses, openvino_devices(statuses.get("openvino")))
    return replace(hardware, libraries=probed[0], openvino_devices=probed[1])


def detect_devices(root: Path | str = "/") -> Hardware:
    """The devices present under `root`; runs nvidia-smi only when describing this very box."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"hardware root {root} is not a directory")
    usb_devices = find_usb_devices(root)
    nvidia_gpus = find_nvidia_gpus(root)
    if root == Path("/") and nvidia_gpus:
        nvidia_gpus = merge_nvidia_smi(nvidia_gpus, query_nvidia_smi())
    return Hardware(
        root=str(root),
        cpu=read_cpu(root),
        board_model=read_board_model(root, cpuinfo_board_model(root)),
        system=read_dmi_system(root),
        render_nodes=find_render_nodes(root),
        accel_devices=find_accel_devices(root),
        usb_devices=usb_devices,
        edgetpus=find_edgetpus(root, usb_devices),
        nvidia_gpus=nvidia_gpus,
        nvidia_driver=read_nvidia_driver(root),
        jetson=read_jetson(root),
        device_nodes=list_device_nodes(root),
        delegate_libraries=find_delegate_libraries(root),
    )


def probe_backend_libraries() -> dict[str, BackendStatus]:
    """Each backend's own probe; a backend whose module cannot even be imported is reported unavailable."""
    from edge_runtime.backends import BACKENDS, backend_class

    statuses = {}
    for key in BACKENDS:
        try:
            statuses[key] = backend_class(key).probe()
        except Exception as error:
            reason = f"backend module failed to load: {type(error).__name__}: {error}"
            statuses[key] = BackendStatus(backend=key, available=False, reason=reason)
    return statuses


def openvino_devices(status: BackendStatus | None) -> tuple[OpenVinoDevice, ...]:
    """OpenVINO's devices with their full names and OPTIMIZATION_CAPABILITIES (which precisions run fast)."""
    if status is None or not status.available:
        return ()
    capabilities = _openvino_capabilities(status.devices)
    return tuple(
        OpenVinoDevice(
            name=device,
            full_name=status.device_names.get(device, device),
            capabilities=capabilities.get(device, ()),
        )
        for device in status.devices
    )


def _openvino_capabilities(devices: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    try:
        import openvino as ov

        core = ov.Core()
    except Exception:
        return {}
    found = {}
    for device in devices:
        try:
            found[device] = tuple(str(c) for c in core.get_property(device, "OPTIMIZATION_CAPABILITIES"))
        except Exception:
            continue
    return found


def query_nvidia_smi() -> list[tuple[str, str, int | None]]:
    """(PCI bus id, name, memory in MiB) per GPU, or nothing when the tool is missing or fails."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return []
    command = [binary, "--query-gpu=pci.bus_id,name,memory.total", "--format=csv,noheader,nounits"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return []
    if result.returncode != 0:
        return []
    return parse_nvidia_smi(result.stdout)


def parse_nvidia_smi(text: str) -> list[tuple[str, str, int | None]]:
    rows = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 3:
            memory = fields[2].split()[0] if fields[2] else ""
            rows.append((fields[0], fields[1], int(memory) if memory.isdigit() else None))
    return rows


def merge_nvidia_smi(gpus: tuple[NvidiaGpu, ...], rows: list[tuple[str, str, int | None]]) -> tuple[NvidiaGpu, ...]:
    """Join by PCI bus id when /proc named it, else by order (both list GPUs in bus order)."""
    by_bus = {_bus_key(bus): (name, memory) for bus, name, memory in rows}
    merged = []
    for position, gpu in enumerate(gpus):
        found = by_bus.get(_bus_key(gpu.bus or ""))
        if found is None and position < len(rows):
            found = rows[position][1:]
        if found is None:
            merged.append(gpu)
        else:
            merged.append(replace(gpu, model=gpu.model or found[0], memory_mib=found[1]))
    return tuple(merged)


def _bus_key(bus: str) -> str:
    """nvidia-smi writes 00000000:17:00.0, /proc writes 0000:17:00.0: compare bus:device.function."""
    return bus.lower()[-7:] if bus else ""
