"""CPU facts from /proc/cpuinfo: architecture, model, core counts and the ISA features kernels use.

The architecture is read from the content of cpuinfo (x86 lists `flags`, 64-bit ARM lists `asimd`
among its `Features`) so a fixture tree describes a box completely; on the real box the running
kernel's `uname -m` is preferred. Flags are reduced to the few that change which kernels a backend
runs (VNNI and AMX for int8 on x86, dot-product and i8mm on ARM), under one spelling each.
"""

from __future__ import annotations

import platform
from collections import Counter
from pathlib import Path

from edge_runtime.hardware.facts import CpuInfo

X86_FLAGS = frozenset(
    {
        "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
        "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
    }
)  # fmt: skip
ARM_FLAGS = frozenset({"neon", "asimd", "asimdhp", "fphp", "asimddp", "i8mm", "sve", "sve2", "bf16", "sme"})
ALIASES = {"asimd": "neon", "asimddp": "dotprod", "amx_tile": "amx", "asimdhp": "fp16"}

ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "armv8l": "armv7l", "i686": "x86"}

ARM_IMPLEMENTERS = {
    "0x41": "ARM", "0x42": "Broadcom", "0x4e": "NVIDIA", "0x51": "Qualcomm", "0x61": "Apple",
    "0xc0": "Ampere", "0x48": "HiSilicon",
}  # fmt: skip
ARM_PARTS = {
    "0xd03": "Cortex-A53", "0xd04": "Cortex-A35", "0xd05": "Cortex-A55", "0xd07": "Cortex-A57",
    "0xd08": "Cortex-A72", "0xd09": "Cortex-A73", "0xd0a": "Cortex-A75", "0xd0b": "Cortex-A76",
    "0xd0c": "Neoverse-N1", "0xd0d": "Cortex-A77", "0xd40": "Neoverse-V1", "0xd41": "Cortex-A78",
    "0xd42": "Cortex-A78AE", "0xd44": "Cortex-X1", "0xd46": "Cortex-A510", "0xd47": "Cortex-A710",
    "0xd48": "Cortex-X2", "0xd49": "Neoverse-N2", "0xd4b": "Cortex-A78C", "0xd4d": "Cortex-A715",
    "0xd4f": "Neoverse-V2", "0xd80": "Cortex-A520", "0xd81": "Cortex-A720",
}  # fmt: skip
X86_VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD", "HygonGenuine": "Hygon"}


def normalise_arch(machine: str) -> str:
    machine = machine.strip().lower()
    return ARCH_ALIASES.get(machine, machine)


def parse_cpuinfo(text: str) -> tuple[list[dict[str, str]], dict[str, str]]:
    """Split cpuinfo into per-processor blocks and the trailing system block (ARM: Hardware, Model)."""
    processors: list[dict[str, str]] = []
    system: dict[str, str] = {}
    for chunk in text.split("\n\n"):
        block = {}
        for line in chunk.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                block[key.strip()] = value.strip()
        if "processor" in block and block["processor"].isdigit():
            processors.append(block)
        elif block:
            system.update(block)
    return processors, system


def normalise_flags(raw: set[str]) -> frozenset[str]:
    kept = {flag for flag in raw if flag in X86_FLAGS or flag in ARM_FLAGS}
    kept |= {alias for flag, alias in ALIASES.items() if flag in kept}
    if raw & {"amx_int8", "amx_bf16"}:
        kept.add("amx")
    return frozenset(kept)


def read_cpuinfo(root: Path) -> tuple[list[dict[str, str]], dict[str, str]]:
    try:
        text = (root / "proc" / "cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    return parse_cpuinfo(text)


def cpuinfo_board_model(root: Path) -> str | None:
    """Raspberry Pi kernels also name the board in cpuinfo's `Model` line."""
    return read_cpuinfo(root)[1].get("Model") or None


def read_cpu(root: Path) -> CpuInfo:
    processors, system = read_cpuinfo(root)
    first = processors[0] if processors else system
    raw_flags = set((first.get("flags") or first.get("Features") or "").split())
    arch = normalise_arch(platform.machine()) if root == Path("/") else _arch_from_cpuinfo(first, raw_flags)
    return CpuInfo(
        arch=arch,
        vendor=_vendor(first),
        model=_model(processors, first),
        physical_cores=_physical_cores(processors),
        logical_cores=max(len(processors), 1),
        flags=normalise_flags(raw_flags),
    )


def _arch_from_cpuinfo(first: dict[str, str], raw_flags: set[str]) -> str:
    if "flags" in first:
        return "x86_64" if "lm" in raw_flags else "x86"
    if "isa" in first:
        return "riscv64" if first["isa"].startswith("rv64") else "riscv32"
    if "asimd" in raw_flags:
        return "aarch64"
    if "CPU architecture" in first or "neon" in raw_flags:
        return "armv7l"
    return "unknown"


def _vendor(first: dict[str, str]) -> str:
    if "vendor_id" in first:
        return X86_VENDORS.get(first["vendor_id"], first["vendor_id"])
    implementer = first.get("CPU implementer", "").lower()
    return ARM_IMPLEMENTERS.get(implementer, implementer or "unknown")


def _model(processors: list[dict[str, str]], first: dict[str, str]) -> str:
    """x86 names itself; ARM cores are named from their part numbers, big.LITTLE parts joined."""
    if "model name" in first and "CPU part" not in first:
        return first["model name"]
    parts = Counter(ARM_PARTS.get(p.get("CPU part", "").lower(), p.get("CPU part", "")) for p in processors)
    named = [name for name, _ in parts.most_common() if name]
    return " + ".join(sorted(named)) or first.get("model name", "unknown")


def _physical_cores(processors: list[dict[str, str]]) -> int:
    """Distinct (package, core) pairs on x86, where SMT siblings share a core id; one per entry on ARM."""
    cores = {(p["physical id"], p["core id"]) for p in processors if "physical id" in p and "core id" in p}
    return len(cores) or max(len(processors), 1)
