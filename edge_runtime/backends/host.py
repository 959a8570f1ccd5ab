"""What every backend asks of the host it runs on: how many cores it may use and what the CPU is called.

Kept free of any backend library, so that probing and reporting work on a box that has none of them.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# x86 names its CPU in `model name`; Raspberry Pi and other Arm boards only name the board or SoC.
_CPU_NAME_KEYS = ("model name", "Model", "Hardware")


def available_cores() -> int:
    """Cores this process may run on: a container or taskset can allow fewer than the box has."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_name_from_cpuinfo(cpuinfo: str) -> str | None:
    """The most specific non-empty name /proc/cpuinfo gives, or None when it names nothing."""
    lines = cpuinfo.splitlines()
    for key in _CPU_NAME_KEYS:
        for line in lines:
            name, _, value = line.partition(":")
            if name.strip() == key and value.strip():
                return value.strip()
    return None


@functools.lru_cache(maxsize=1)
def cpu_name() -> str:
    """A human name for the CPU, for `RunsOn.device_name` and probe results; never empty."""
    try:
        cpuinfo = CPUINFO.read_text(errors="replace")
    except OSError:
        cpuinfo = ""
    return cpu_name_from_cpuinfo(cpuinfo) or platform.processor() or platform.machine() or "CPU"
