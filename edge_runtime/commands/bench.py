"""`edge-runtime bench`: latency, throughput and fidelity of each way this box can run a model.

Without `--select` the candidates are the runnable choices of the box's profile (narrowed by
`--backend`, `--device`, `--precision`, `--variant`). With `--select` every backend, device, variant
and precision this box can run is measured, each is checked against the fp32 reference, and the
fastest within the tolerance is stored as this box's choice for the model.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from edge_runtime.backends import BACKENDS, backend_class
from edge_runtime.backends.base import RunsOn
from edge_runtime.config.directories import default_state_dir
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.hardware.facts import Hardware
from edge_runtime.measure.benchmark import Measurement, Progress, bench_feed, measure_latency, measure_throughput
from edge_runtime.measure.fidelity import DEFAULT_TOLERANCE, FidelityReport, compare, load_reference
from edge_runtime.package.loader import ModelPackage, open_package
from edge_runtime.placement.loading import Box, load_candidate, look_at_box, select_for
from edge_runtime.placement.model import LoadedModel
from edge_runtime.placement.profiles import Choice, DeviceProfile
from edge_runtime.placement.selection import Candidate, Overrides, model_key, select, store_choice


@dataclass
class ChoiceResult:
    candidate: Candidate
    runs_on: RunsOn | None = None
    load_ms: float | None = None
    measurement: Measurement | None = None
    fidelity: FidelityReport | None = None
    error: str | None = None
    model: LoadedModel | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return self.candidate.choice.label()

    @property
    def usable(self) -> bool:
        return self.error is None and (self.fidelity is None or self.fidelity.passed)

    def to_dict(self) -> dict[str, Any]:
        runs_on = self.runs_on
        return {
            "choice": self.label,
            "backend": self.candidate.choice.backend,
            "device": runs_on.device if runs_on else self.candidate.choice.device,
            "device_name": runs_on.device_name if runs_on else self.candidate.device_name,
            "variant": self.candidate.variant_id,
            "precision": runs_on.precision if runs_on else None,
            "details": dict(runs_on.details) if runs_on else {},
            "load_ms": self.load_ms,
            **(self.measurement.to_dict() if self.measurement else {"latency": None, "throughput": None}),
            "fidelity": self.fidelity.to_dict() if self.fidelity else None,
            "error": self.error,
        }


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
    results = measure_all(package, candidates, args, check, tolerance)
    stored = store_fastest(package, results, args.hint, state_dir) if args.select else None
    if args.json:
        print(json.dumps(bench_report(package, box, args, tolerance, results, stored), indent=2))
    else:
        print(render(package, results, args.hint, stored))
    return 0 if any(r.usable for r in results) else 1


def every_runnable_choice(package: ModelPackage, hardware: Hardware, overrides: Overrides) -> list[Candidate]:
    """Every backend, device, loadable variant and precision this box offers, as candidates with reasons."""
    choices = []
    for backend, status in hardware.libraries.items():
        if not status.available:
            continue
        for fields in backend_class(backend).measurable_choices(status, hardware):
            for variant_id, variant in package.manifest.variants.items():
                if variant.format in BACKENDS[backend].formats:
                    choices.append(Choice.model_validate({"backend": backend, **fields, "variants": [variant_id]}))
    if not choices:
        return []
    profile = DeviceProfile(name="bench-select", choices=tuple(choices))
    return select(package, hardware, profile=profile, overrides=overrides).runnable()


def measure_all(
    package: ModelPackage, candidates: list[Candidate], args: argparse.Namespace, check: bool, tolerance: float
) -> list[ChoiceResult]:
    progress = Progress(len(candidates))
    references: dict[str, LoadedModel] = {}
    results = []
    try:
        for candidate in candidates:
            progress.start(f"{candidate.choice.label()} {candidate.variant_id}")
            result = ChoiceResult(candidate)
            try:
                measure_one(package, result, args, progress)
                if check and result.model is not None:
                    reference = load_reference(package, candidate.variant_id, references)
                    result.fidelity = compare(result.model, reference, tolerance=tolerance)
            except EdgeRuntimeError as error:
                result.error = str(error)
            finally:
                if result.model is not None:
                    result.model.close()
                    result.model = None
            results.append(result)
    finally:
        progress.finish()
        for model in references.values():
            model.close()
    return results


def measure_one(package: ModelPackage, result: ChoiceResult, args: argparse.Namespace, progress: Progress) -> None:
    choice = result.candidate.choice
    choice = choice.model_copy(update={"hint": args.hint, "threads": args.threads or choice.threads})
    started = time.perf_counter()
    model = load_candidate(package, replace(result.candidate, choice=choice))
    result.load_ms = (time.perf_counter() - started) * 1000
    result.model = model
    result.runs_on = model.backend.runs_on
    feed = bench_feed(model)
    latency = measure_latency(model, feed, args.seconds, progress=progress)
    throughput = measure_throughput(model, feed, args.seconds, progress=progress)
    result.measurement = Measurement(latency, throughput)


def store_fastest(
    package: ModelPackage, results: list[ChoiceResult], hint: str, state_dir: Path
) -> ChoiceResult | None:
    """Store the fastest choice within tolerance: lowest median latency, or highest throughput."""
    usable = [r for r in results if r.usable and r.measurement is not None]
    if not usable:
        return None

    def speed(result: ChoiceResult) -> float:
        measured = result.measurement
        assert measured is not None and measured.throughput is not None
        return -measured.throughput.throughput_fps if hint == "throughput" else measured.latency.median_ms

    best = min(usable, key=speed)
    assert best.measurement is not None and best.candidate.variant_id is not None
    metrics = {"median_ms": best.measurement.latency.median_ms}
    if best.measurement.throughput is not None:
        metrics["throughput_fps"] = best.measurement.throughput.throughput_fps
    if best.fidelity is not None:
        metrics["max_rel_error"] = best.fidelity.max_rel_error
    store_choice(state_dir, model_key(package), best.candidate.choice, best.candidate.variant_id, metrics)
    return best


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
