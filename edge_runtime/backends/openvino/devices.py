"""OpenVINO's devices as this runtime sees them: which are on the box, and which precision each may run.

OpenVINO names devices "CPU", "GPU.0" (asked for as "GPU"), "NPU", and virtual ones over them
("AUTO:GPU,CPU").

One `openvino.Core` serves the whole process (creating one loads every plugin). OpenVINO is imported
inside the functions, so importing this module needs no OpenVINO.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from edge_runtime.errors import BackendUnavailableError, ConfigError
from edge_runtime.package.manifest import Precision

if TYPE_CHECKING:
    from edge_runtime.hardware.facts import Hardware

VIRTUAL_DEVICES = frozenset({"AUTO", "MULTI", "HETERO"})
HINT_TYPE = {Precision.FP32: "f32", Precision.BF16: "bf16", Precision.FP16: "f16"}
FROM_HINT_TYPE = {value: key for key, value in HINT_TYPE.items()}
_CAPABILITY = {Precision.FP32: "FP32", Precision.BF16: "BF16", Precision.FP16: "FP16", Precision.INT8: "INT8"}


@functools.lru_cache(maxsize=1)
def openvino_core() -> Any:
    import openvino as ov

    return ov.Core()


def require_core() -> Any:
    try:
        return openvino_core()
    except Exception as error:
        raise BackendUnavailableError(f"OpenVINO cannot be used: {first_line(error)}") from None


def first_line(error: BaseException) -> str:
    """OpenVINO prefixes its messages with source locations; the user needs the first real line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Exception from ", "Check '"))]
    return (useful or lines or [type(error).__name__])[0]


def device_capabilities() -> dict[str, tuple[str, ...]]:
    """OPTIMIZATION_CAPABILITIES (FP32, BF16, FP16, INT8, EXPORT_IMPORT, ...) per device; {} without OpenVINO."""
    try:
        core = openvino_core()
        return {d: tuple(core.get_property(d, "OPTIMIZATION_CAPABILITIES")) for d in core.available_devices}
    except Exception:
        return {}


def device_family(device: str) -> str:
    """'GPU.1' -> 'GPU', 'AUTO:GPU,CPU' -> 'AUTO'."""
    return device.partition(":")[0].partition(".")[0].upper()


def _is_available(name: str, available: Sequence[str]) -> bool:
    if name in available or any(d.startswith(name + ".") for d in available):
        return True
    return name.endswith(".0") and name[:-2] in available


def resolve_device(device: str, available: Sequence[str]) -> list[str]:
    """The physical devices a device string may run on; raises when one of them is not on this box."""
    head, _, rest = device.partition(":")
    if head.upper() in VIRTUAL_DEVICES:
        names = [name.strip() for name in rest.split(",") if name.strip()]
        excluded = {name[1:] for name in names if name.startswith("-")}
        wanted = [name for name in names if not name.startswith("-")]
        if not wanted:  # AUTO leaves the NPU out of its default list
            skip = excluded | {"NPU"}
            wanted = [d for d in available if d not in skip and device_family(d) not in skip]
    else:
        wanted = [device]
    missing = [name for name in wanted if not _is_available(name, available)]
    if missing or not wanted:
        what = f"device {missing[0]!r}" if missing else "a device"
        seen = ", ".join(available) or "no devices"
        raise BackendUnavailableError(
            f"OpenVINO {what} (asked as {device!r}) is not available on this box; OpenVINO sees: {seen}"
        )
    return wanted


def float_precision_for(variant: Precision, asked: Precision | None, family: str) -> Precision:
    """Precision of the float ops: what was asked, else the variant's own, never lower.

    An fp16 variant runs in f32 on a CPU (fp16 there is emulated or mapped to bf16) and in f16 on a
    GPU or NPU, which compute it natively. Quantized ops of an int8 variant run int8 regardless.
    """
    if asked is Precision.INT8:
        if variant is not Precision.INT8:
            raise ConfigError(
                f"precision int8 needs an int8 model variant; OpenVINO cannot quantize this {variant.value} one"
            )
        return Precision.FP32
    if asked is not None:
        return asked
    if variant is Precision.INT8:
        return Precision.FP32
    if variant is Precision.FP16:
        return Precision.FP16 if family in ("GPU", "NPU") else Precision.FP32
    return variant


def check_capable(device: str, precision: Precision, capabilities: Sequence[str]) -> None:
    """An unsupported INFERENCE_PRECISION_HINT is not refused by OpenVINO but silently replaced, so refuse it here."""
    if _CAPABILITY[precision] not in capabilities:
        possible = [p.value for p, capability in _CAPABILITY.items() if capability in capabilities and p in HINT_TYPE]
        raise ConfigError(
            f"OpenVINO device {device} cannot run {precision.value}: its OPTIMIZATION_CAPABILITIES are "
            f"{', '.join(capabilities) or 'empty'}; set precision to one it can run ({', '.join(possible) or 'none'})"
        )


def device_problem(device: str, listed: Sequence[str], hardware: Hardware) -> str | None:
    """Why OpenVINO cannot open `device` here (each device of a virtual one), or None."""
    head, _, rest = device.partition(":")
    if head.upper() in VIRTUAL_DEVICES:
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


def display_name(device: str, names: dict[str, str]) -> str | None:
    """OpenVINO's full name for a device asked for as `device` ("GPU" names "GPU.0")."""
    if device in names:
        return names[device]
    return next((name for listed, name in names.items() if listed.startswith(device + ".")), None)


def offered_precisions(device: str, hardware: Hardware) -> list[str | None]:
    """The variant's own precision, plus the lower float precisions the device offers."""
    capabilities = hardware.openvino_capabilities(device) or ()
    found: list[str | None] = [None] if "FP32" in capabilities else []
    found += [name for name, cap in (("fp16", "FP16"), ("bf16", "BF16")) if cap in capabilities]
    return found or [None]
