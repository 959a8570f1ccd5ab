"""Whether a backend library can use a device on this box, read from the library's BackendStatus.

Detection says what is plugged in; a library's status says what it can open. Each library names
devices its own way: OpenVINO "GPU.0" (asked for as "GPU"), ONNX Runtime the kind of execution
provider ("CUDA", "TENSORRT"), LiteRT "cpu", plus "edgetpu:usb:0" or "edgetpu:pci:0" once
libedgetpu loads. When a device is plugged in but not usable, the reason names the usual culprit.
"""

from __future__ import annotations

from edge_runtime.backends.base import BackendStatus
from edge_runtime.hardware.facts import Hardware

VIRTUAL_OPENVINO_DEVICES = ("AUTO", "MULTI", "HETERO")


def library_problem(backend: str, status: BackendStatus | None) -> str | None:
    if status is None:
        return f"library {backend} was not probed"
    if not status.available:
        return f"library {backend} not importable: {status.reason or 'no reason given'}"
    return None


def device_problem(
    backend: str, device: str, delegate: str | None, edgetpu_device: str, status: BackendStatus, hardware: Hardware
) -> str | None:
    listed = status.devices
    if backend == "openvino":
        return _openvino_problem(device, listed, hardware)
    if backend == "onnxruntime":
        kind = device.partition(":")[0].upper()
        if kind not in listed:
            have = ", ".join(listed) or "none"
            hint = "; CUDA and TensorRT need an onnxruntime-gpu build" if kind in ("CUDA", "TENSORRT") else ""
            return f"onnxruntime has no {kind} execution provider (it has: {have}){hint}"
        return None
    if delegate == "edgetpu":
        return _edgetpu_problem(edgetpu_device, status, hardware)
    return None  # CPU kernels are always there; gpu/external delegates are only known by loading them


def device_display_name(
    backend: str, device: str, delegate: str | None, edgetpu_device: str, status: BackendStatus
) -> str | None:
    """The library's own name for the device, e.g. "Intel(R) AI Boost" for OpenVINO's NPU."""
    names = status.device_names
    if backend == "litert":
        if delegate != "edgetpu":
            return names.get("cpu")
        prefix = _edgetpu_prefix(edgetpu_device)
        return next((name for key, name in names.items() if key.startswith(prefix)), None)
    key = device.partition(":")[0].upper() if backend == "onnxruntime" else device
    if key in names:
        return names[key]
    return next((name for listed, name in names.items() if listed.startswith(key + ".")), None)


def _openvino_problem(device: str, listed: tuple[str, ...], hardware: Hardware) -> str | None:
    head, _, rest = device.partition(":")
    if head.upper() in VIRTUAL_OPENVINO_DEVICES:
        wanted = [name.strip() for name in rest.split(",") if name.strip() and not name.startswith("-")]
    else:
        wanted = [device]
    for name in wanted:
        if not (name in listed or any(d.startswith(name + ".") for d in listed)):
            problem = f"OpenVINO does not list device {name} (it lists: {', '.join(listed) or 'none'})"
            if name.startswith("NPU") and "npu" in hardware.facts:
                problem += (
                    "; /dev/accel is present, so the NPU user-space driver (libze_intel_npu) is missing "
                    "or this user may not open /dev/accel (render group)"
                )
            return problem
    return None


def _edgetpu_prefix(edgetpu_device: str) -> str:
    kind = edgetpu_device.partition(":")[0]
    return f"edgetpu:{kind}" if kind in ("usb", "pci") else "edgetpu:"


def _edgetpu_problem(edgetpu_device: str, status: BackendStatus, hardware: Hardware) -> str | None:
    if any(device.startswith(_edgetpu_prefix(edgetpu_device)) for device in status.devices):
        return None
    problem = "Edge TPU delegate not usable by litert"
    if "edgetpu" not in hardware.delegate_libraries:
        problem += ": libedgetpu.so.1 not found (install libedgetpu1-std)"
    if "Edge TPU" in status.reason:
        problem += f" ({status.reason})"
    return problem + f"; litert lists: {', '.join(status.devices) or 'nothing'}"
