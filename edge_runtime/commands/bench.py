"""`edge-runtime bench`: latency, throughput and fidelity of each way this box can run a model.

Without `--select` the candidates are the runnable choices of the box's profile (narrowed by
`--backend`, `--device`, `--precision`, `--variant`). With `--select` every backend, device, variant
and precision this box can run is measured, each is checked against the fp32 reference, and the
fastest within the tolerance is stored as this box's choice for the model.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from edge_runtime.config.directories import default_state_dir
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.measure.benchmark import Progress
from edge_runtime.measure.choices import ChoiceResult, every_runnable_choice, measure_choices, store_fastest
from edge_runtime.measure.fidelity import DEFAULT_TOLERANCE, FidelityReport
from edge_runtime.package.loader import ModelPackage, open_package
from edge_runtime.placement.loading import Box, look_at_box, select_for
from edge_runtime.placement.selection import Overrides


def run_bench(args: argparse.Namespace) -> int:
    package = open_package(args.model)
    box = look_at_box(args.root, args.profiles)
    state_dir = args.state_dir or default_state_dir()
    overrides = Overrides(args.backend, args.device, args.precision, args.variant)
    if args.select:
        candidates = every_runnable_choice(package, box.hardware, overrides)
    else:
        candidates = select_for(package, box, overrides, state_dir).runnable()
    if not candidates:
        raise EdgeRuntimeError(f"nothing can run model {package.name} on this box; see `edge-runtime probe --model`")
    check = args.compare or args.select
    tolerance = args.tolerance if args.tolerance is not None else DEFAULT_TOLERANCE
    results = measure_choices(
        package,
        candidates,
        hint=args.hint,
        seconds=args.seconds,
        rounds=args.rounds,
        threads=args.threads,
        tolerance=tolerance if check else None,
        progress=Progress(len(candidates) * args.rounds),
    )
    stored = store_fastest(package, results, args.hint, state_dir, "bench --select") if args.select else None
    if args.json:
        print(json.dumps(bench_report(package, box, args, tolerance, results, stored), indent=2))
    else:
        print(render(package, results, args.hint, stored))
    return 0 if any(r.usable for r in results) else 1


def bench_report(
    package: ModelPackage,
    box: Box,
    args: argparse.Namespace,
    tolerance: float,
    results: list[ChoiceResult],
    stored: ChoiceResult | None,
) -> dict[str, Any]:
    return {
        "model": {"name": package.name, "version": package.manifest.version, "path": str(package.root)},
        "profile": box.match.profile.name if box.match.profile else None,
        "cpu": box.hardware.cpu.model,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "hint": args.hint,
        "tolerance": tolerance if (args.compare or args.select) else None,
        "results": [r.to_dict() for r in results],
        "selected": stored.to_dict() if stored else None,
    }


COLUMNS = (
    "choice",
    "variant",
    "precision",
    "load ms",
    "median ms",
    "p90 ms",
    "p99 ms",
    "fps",
    "max abs err",
    "rel err",
)


def render(package: ModelPackage, results: list[ChoiceResult], hint: str, stored: ChoiceResult | None) -> str:
    rows = [COLUMNS] + [_row(r) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = [f"Model {package.name} {package.manifest.version}, hint {hint}"]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    for result in results:
        if result.error:
            lines.append(f"{result.label} {result.candidate.variant_id}: failed: {result.error}")
        elif result.fidelity is not None and not result.fidelity.passed:
            lines.append(f"{result.label} {result.candidate.variant_id}: refused: {_refusal(result.fidelity)}")
    if stored is not None:
        lines.append(f"Stored as this box's choice: {stored.label} {stored.candidate.variant_id}")
    return "\n".join(lines)


def _refusal(report: FidelityReport) -> str:
    worst = max(report.outputs, key=lambda o: o.max_rel_error)
    return f"output {worst.name} off by {worst.max_rel_error:.2%} of its range, tolerance {report.tolerance:.2%}"


def _row(result: ChoiceResult) -> tuple[str, ...]:
    measured = result.measurement
    fidelity = result.fidelity
    latency = measured.latency if measured else None
    fps = measured.throughput.throughput_fps if measured and measured.throughput else None
    return (
        result.label,
        result.candidate.variant_id or "-",
        result.runs_on.precision if result.runs_on else "-",
        _number(result.load_ms, 1),
        _number(latency.median_ms if latency else None, 3),
        _number(latency.p90_ms if latency else None, 3),
        _number(latency.p99_ms if latency else None, 3),
        _number(fps, 1),
        _number(max((o.max_abs_error for o in fidelity.outputs), default=0.0) if fidelity else None, 4),
        f"{fidelity.max_rel_error:.2%}" if fidelity else "-",
    )


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
