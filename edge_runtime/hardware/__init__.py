"""Hardware detection: what accelerators and CPU features a box has.

`detect()` is the entry point: it scans the filesystem under a root (device nodes, sysfs, procfs,
device tree) and asks each backend library which devices it can use. `detect_devices()` does only
the scan, which is what tests run against the fixture trees of real boxes.
"""

from edge_runtime.hardware.detect import detect, detect_devices, probe_backend_libraries
from edge_runtime.hardware.facts import (
    FACT_MISSING,
    FACTS,
    AccelDevice,
    CpuInfo,
    EdgeTpu,
    Fact,
    Hardware,
    JetsonInfo,
    NvidiaGpu,
    OpenVinoDevice,
    RenderNode,
    UsbDevice,
)

__all__ = [
    "FACTS",
    "FACT_MISSING",
    "AccelDevice",
    "CpuInfo",
    "EdgeTpu",
    "Fact",
    "Hardware",
    "JetsonInfo",
    "NvidiaGpu",
    "OpenVinoDevice",
    "RenderNode",
    "UsbDevice",
    "detect",
    "detect_devices",
    "probe_backend_libraries",
]
