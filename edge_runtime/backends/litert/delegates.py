"""LiteRT delegates: which library each delegate is, how it is loaded, and what it runs on.

The delegate libraries (libedgetpu, a GPU or vendor plugin) are opened only when a model is loaded
with them; a missing one is a `DelegateError` the backend answers with the next fallback, as it
answers a delegate that loads but cannot prepare the model.

XNNPACK is no library of its own: LiteRT applies it by default to every interpreter, so delegate
"xnnpack" is the interpreter as it comes, and "none" asks for BUILTIN_WITHOUT_DEFAULT_DELEGATES.
"""

from __future__ import annotations

import ctypes
import logging
import platform
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from edge_runtime.backends.base import BackendOptions, BackendStatus
from edge_runtime.backends.host import cpu_name
from edge_runtime.backends.litert.interpreter import InterpreterLibrary

# Logged under the backend's name, the one logger a user sets up for LiteRT.
log = logging.getLogger("edge_runtime.backends.litert.backend")

DelegateName = Literal["xnnpack", "edgetpu", "gpu", "external", "none"]
EDGETPU_LIBRARIES = {"Linux": "libedgetpu.so.1", "Darwin": "libedgetpu.1.dylib", "Windows": "edgetpu.dll"}
GPU_DELEGATE_LIBRARY = "libtensorflowlite_gpu_delegate.so"
# A USB Coral boots as 1a6e:089a, takes its firmware from libedgetpu and comes back as 18d1:9302;
# opening it during that switch fails once.
EDGETPU_RETRY_PAUSE_S = 2.0
_CORAL_USB_IDS = {("1a6e", "089a"), ("18d1", "9302")}
# XNNPACK first; the built-in kernels take what XNNPACK cannot prepare (int8 weights stored sparse).
_CPU_FALLBACK: list[DelegateName] = ["xnnpack", "none"]
_PLUGIN_SYMBOLS = ("tflite_plugin_create_delegate", "tflite_plugin_destroy_delegate")


class LiteRtOptions(BackendOptions):
    """LiteRT picks its accelerator by delegate, so `device` is not used; `delegate` says where to run.

    A .tflite file runs at the precision it was converted to, so `precision` cannot lower it.
    """

    delegate: DelegateName = Field("xnnpack", description="xnnpack: CPU (LiteRT's default); none: plain CPU kernels.")
    fallback: list[DelegateName] = Field(
        default_factory=lambda: _CPU_FALLBACK.copy(),
        description="Delegates tried in order when the chosen one fails to load or to prepare the model; "
        "[] makes that an error.",
    )
    edgetpu_device: str = Field(
        ":0",
        pattern=r"^(?:(?:usb|pci)(?::\d+)?|:\d+)$",
        description="usb, usb:N, pci, pci:N, or :N (N-th of any kind).",
    )
    delegate_library: str | None = Field(
        None,
        description=f"A TFLite delegate plugin for gpu/external; gpu defaults to {GPU_DELEGATE_LIBRARY}",
    )
    delegate_options: dict[str, str] = Field(default_factory=dict, description="Options for the gpu/external plugin.")

    @model_validator(mode="after")
    def _external_needs_library(self) -> LiteRtOptions:
        if self.delegate_library is None and "external" in (self.delegate, *self.fallback):
            raise ValueError("delegate 'external' needs delegate_library, the path of its shared library")
        return self


def edgetpu_devices() -> list[str]:
    """Edge TPUs on this box, named as the edgetpu delegate's `device` option names them."""
    usb = 0
    for device in Path("/sys/bus/usb/devices").glob("*"):
        try:
            ids = ((device / "idVendor").read_text().strip(), (device / "idProduct").read_text().strip())
        except OSError:
            continue
        usb += ids in _CORAL_USB_IDS
    pci = len(list(Path("/dev").glob("apex_*")))
    return [f"usb:{i}" for i in range(usb)] + [f"pci:{i}" for i in range(pci)]


def edgetpu_library() -> str:
    return EDGETPU_LIBRARIES.get(platform.system(), EDGETPU_LIBRARIES["Linux"])


def edgetpu_name(device: str) -> str:
    kind = {"usb": " (USB)", "pci": " (PCIe)"}.get(device.partition(":")[0], "")
    return f"Coral Edge TPU{kind}"


def edgetpu_prefix(edgetpu_device: str) -> str:
    """How the probe lists the Edge TPU an `edgetpu_device` option ("usb:0", "pci", "") asks for."""
    kind = edgetpu_device.partition(":")[0]
    return f"edgetpu:{kind}" if kind in ("usb", "pci") else "edgetpu:"


def edgetpu_problem(edgetpu_device: str, status: BackendStatus, delegate_libraries: Collection[str]) -> str | None:
    """Why the edgetpu delegate cannot open the Edge TPU asked for, or None."""
    if any(device.startswith(edgetpu_prefix(edgetpu_device)) for device in status.devices):
        return None
    problem = "Edge TPU delegate not usable by litert"
    if "edgetpu" not in delegate_libraries:
        problem += ": libedgetpu.so.1 not found (install libedgetpu1-std)"
    if "Edge TPU" in status.reason:
        problem += f" ({status.reason})"
    return problem + f"; litert lists: {', '.join(status.devices) or 'nothing'}"


def delegate_choices(devices: Sequence[str]) -> list[dict[str, Any]]:
    """The CPU through XNNPACK, and each Edge TPU the probe lists, as choice fields."""
    found: list[dict[str, Any]] = []
    for device in devices:
        kind, _, where = device.partition(":")
        if kind == "edgetpu":
            found.append({"device": "CPU", "delegate": "edgetpu", "options": {"edgetpu_device": where}})
        else:
            found.append({"device": "CPU", "delegate": "xnnpack", "options": {}})
    return found


def plugin_problem(library: str) -> str | None:
    """Why `library` is no delegate plugin, found before LiteRT's loader meets it half-made."""
    try:
        handle = ctypes.CDLL(library)
    except OSError as exc:
        return str(exc) if library in str(exc) else f"cannot load {library}: {exc}"
    missing = [symbol for symbol in _PLUGIN_SYMBOLS if not hasattr(handle, symbol)]
    if missing:
        return f"{library} is no TFLite delegate plugin (it lacks {', '.join(missing)})"
    return None


class DelegateError(Exception):
    """A delegate could not be loaded or could not take the model; the next fallback may."""


@dataclass(frozen=True)
class DelegateChoice:
    name: DelegateName
    library: str | None = None  # None for the CPU, whose kernels are built into the interpreter
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, name: DelegateName, options: LiteRtOptions) -> DelegateChoice:
        if name == "edgetpu":
            return cls(name, edgetpu_library(), {"device": options.edgetpu_device})
        if name == "gpu":
            return cls(name, options.delegate_library or GPU_DELEGATE_LIBRARY, dict(options.delegate_options))
        if name == "external":
            return cls(name, options.delegate_library, dict(options.delegate_options))
        return cls(name)

    def load(self, library: InterpreterLibrary) -> Any:
        """The loaded delegate (None for the CPU); raises DelegateError with the loader's error."""
        if self.library is None:
            return None
        problem = plugin_problem(self.library)
        if problem is not None:
            if self.name == "edgetpu":
                problem += " (install the Edge TPU runtime, libedgetpu1-std)"
            raise DelegateError(problem)
        retry = self.name == "edgetpu" and not self.options["device"].startswith("pci")
        while True:
            try:
                return library.module.load_delegate(self.library, self.options)
            except (ValueError, RuntimeError) as exc:
                if not retry:
                    raise DelegateError(str(exc).replace("\n", " ").strip()) from exc
                retry = False
                log.info("Edge TPU did not open (%s); retrying once in %.0f s", exc, EDGETPU_RETRY_PAUSE_S)
                time.sleep(EDGETPU_RETRY_PAUSE_S)

    def device(self) -> tuple[str, str]:
        """(device, device_name) for RunsOn."""
        if self.name == "edgetpu":
            device = self.options["device"]
            return f"edgetpu:{device.lstrip(':')}", edgetpu_name(device)
        if self.library is not None:
            return self.name, f"{self.name} delegate {Path(self.library).name}"
        return "cpu", cpu_name()
