"""The host facts every backend reports: usable cores and the CPU's name, read from this real box."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edge_runtime.backends.host import available_cores, cpu_name, cpu_name_from_cpuinfo
from edge_runtime.backends.litert.backend import LiteRtBackend
from edge_runtime.backends.onnxruntime.backend import OnnxRuntimeBackend

RASPBERRY_PI_4_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm crc32 cpuid
CPU implementer\t: 0x41
CPU architecture: 8
CPU part\t: 0xd08

Hardware\t: BCM2835
Revision\t: c03114
Model\t\t: Raspberry Pi 4 Model B Rev 1.4
"""


def test_available_cores_follows_the_affinity_mask() -> None:
    allowed = os.sched_getaffinity(0)
    assert available_cores() == len(allowed) >= 1
    os.sched_setaffinity(0, {min(allowed)})  # as taskset or a container's cpuset would
    try:
        assert available_cores() == 1
    finally:
        os.sched_setaffinity(0, allowed)


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="reads Linux procfs")
def test_cpu_name_is_the_model_name_line_on_this_box() -> None:
    model_names = [
        line.partition(":")[2].strip()
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("model name")
    ]
    if model_names:
        assert cpu_name() == model_names[0]
    assert cpu_name() and cpu_name() != "CPU"


def test_arm_boards_are_named_by_their_model_then_their_hardware() -> None:
    assert cpu_name_from_cpuinfo(RASPBERRY_PI_4_CPUINFO) == "Raspberry Pi 4 Model B Rev 1.4"
    without_model = RASPBERRY_PI_4_CPUINFO.replace("Model\t\t: Raspberry Pi 4 Model B Rev 1.4\n", "")
    assert cpu_name_from_cpuinfo(without_model) == "BCM2835"
    assert cpu_name_from_cpuinfo("model name\t: \nModel\t: Rock 5B\n") == "Rock 5B"  # an empty name is skipped
    assert cpu_name_from_cpuinfo("") is None


def test_backends_report_the_same_cpu_name() -> None:
    assert LiteRtBackend.probe().device_names["cpu"] == cpu_name()
    assert OnnxRuntimeBackend.probe().device_names["CPU"] == cpu_name()
