"""`edge-runtime probe`: what this box has, what loads, which profile matched, and why."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from edge_runtime.config.directories import default_state_dir
from edge_runtime.hardware.facts import CpuInfo, Hardware
from edge_runtime.package.loader import open_package
from edge_runtime.placement.loading import Box, look_at_box, select_for
from edge_runtime.placement.selection import Selection, StoredChoice, load_stored_choice, model_key
from edge_runtime.serving.batch_choice import BATCH_MARGIN, BatchChoices, Throughputs


def run_probe(args: argparse.Namespace) -> int:
    box = look_at_box(args.root, args.profiles)
    state_dir = args.state_dir or default_state_dir()
    selection = stored = None
    if args.model is not None:
        package = open_package(args.model)
        selection = select_for(package, box, state_dir=state_dir)
        stored = load_stored_choice(state_dir, model_key(package))
    batching = BatchChoices(state_dir).remembered()
    if args.json:
        print(json.dumps(probe_report(box, selection, batching, stored), indent=2, default=str))
    else:
        print(render(box, selection, batching, stored))
    return 0


def probe_report(
    box: Box,
    selection: Selection | None,
    batching: list[tuple[str, Throughputs]] | None = None,
    stored: StoredChoice | None = None,
) -> dict[str, Any]:
    report: dict[str, Any] = {"hardware": box.hardware.to_dict(), "profile": box.match.to_dict()}
    if selection is not None:
        report["selection"] = selection.to_dict()
    if stored is not None:
        report["measured_choice"] = {
            "variant": stored.variant_id,
            "choice": stored.choice.label(),
            "chosen_by": stored.chosen_by,
            "stored_at": stored.stored_at,
            "figures": dict(stored.metrics),
        }
    if batching:
        report["batching"] = [
            {"model": model, **asdict(measured), "batches_chosen": measured.ratio >= BATCH_MARGIN}
            for model, measured in batching
        ]
    return report


def batching_lines(batching: list[tuple[str, Throughputs]]) -> list[str]:
    """What serving measured on this box: whether batches beat single requests in flight, per model."""
    lines = ["", f"Batching measured on this box (batches are chosen at {BATCH_MARGIN:.2f}× or more)"]
    for model, measured in sorted(batching):
        verdict = "batches" if measured.ratio >= BATCH_MARGIN else "single requests side by side"
        lines.append(
            f"  {model}: batches of {measured.batch_size} {measured.batched:.1f}/s, single {measured.single:.1f}/s "
            f"({measured.ratio:.2f}×) → {verdict}  [{measured.measured_at}]"
        )
    return lines


def stored_choice_lines(stored: StoredChoice) -> list[str]:
    """The choice measured on this box for the model, with the figures it won by."""
    figures = stored.metrics
    measured = [f"median {figures['median_ms']:.3f} ms"] if "median_ms" in figures else []
    measured += [f"{figures['throughput_fps']:.1f}/s"] if "throughput_fps" in figures else []
    measured += [f"largest error {figures['max_rel_error']:.2%} of the range"] if "max_rel_error" in figures else []
    return [
        "",
        f"Measured on this box by {stored.chosen_by} ({stored.stored_at}): {stored.choice.label()} "
        f"{stored.variant_id}" + (f", {', '.join(measured)}" if measured else ""),
    ]


def render(
    box: Box,
    selection: Selection | None,
    batching: list[tuple[str, Throughputs]] | None = None,
    stored: StoredChoice | None = None,
) -> str:
    lines = ["Hardware", *(f"  {name:<10} {value}" for name, value in hardware_lines(box.hardware))]
    lines += ["", "Backends"]
    for key, status in box.hardware.libraries.items():
        if not status.available:
            lines.append(f"  {key:<12} not available: {status.reason}")
            continue
        devices = ", ".join(
            f"{d} ({status.device_names[d]})" if d in status.device_names else d for d in status.devices
        )
        lines.append(f"  {key:<12} {status.version or ''}  devices: {devices or 'none'}")
        if status.reason:
            lines.append(f"  {'':<12} {status.reason}")
    profile = box.match.profile
    lines += ["", f"Profile: {profile.name} ({profile.source})" if profile else "Profile: none matched"]
    for verdict in box.match.verdicts:
        if not verdict.chosen:
            lines.append(f"  not {verdict.name}: {'; '.join(verdict.reasons)}")
    if selection is not None:
        lines += ["", "Choices for " + selection.explain()]
    if stored is not None:
        lines += stored_choice_lines(stored)
    if batching:
        lines += batching_lines(batching)
    return "\n".join(lines)


def int8_accumulation(cpu: CpuInfo) -> str:
    if cpu.int8_pairs_saturate:
        return "int8 products add in pairs of 16 bits (8-bit weights can saturate; 7-bit ones cannot)"
    return "int8 products accumulate in 32 bits"


def hardware_lines(hardware: Hardware) -> list[tuple[str, str]]:
    cpu = hardware.cpu
    flags = " ".join(sorted(cpu.flags)) or "none of note"
    rows = [
        ("CPU", f"{cpu.model} ({cpu.arch}), {cpu.physical_cores} cores / {cpu.logical_cores} threads"),
        ("ISA", flags),
        ("int8", f"{' '.join(cpu.int8_features)}: {int8_accumulation(cpu)}"),
        ("Board", hardware.board_model or hardware.system or "-"),
        ("iGPU", ", ".join(f"{n.path} ({n.vendor or 'unknown'})" for n in hardware.render_nodes) or "none"),
        ("NPU", ", ".join(f"{a.path} ({a.driver or 'driver unknown'})" for a in hardware.accel_devices) or "none"),
        ("Edge TPU", ", ".join(f"{t.kind} {t.location}" for t in hardware.edgetpus) or "none"),
        ("NVIDIA", ", ".join(f"{g.index}: {g.model or 'unknown model'}" for g in hardware.nvidia_gpus) or "none"),
    ]
    if hardware.jetson is not None:
        rows.append(("Jetson", f"L4T {hardware.jetson.l4t_release or '?'} ({hardware.jetson.soc or '?'})"))
    return rows
