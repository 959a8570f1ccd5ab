"""Whether an int8 variant's recorded accuracy holds on this box's CPU: checked once, then remembered.

The integers an int8 kernel produces depend on the CPU: x86 without VNNI or AMX adds pairs of
products in 16 bits and saturates where VNNI and AMX do not (see
`converters.context.QuantizationSettings`). So the accuracy edge-convert recorded holds on a box only
if its CPU chooses the same kernels. A variant whose `measured_on` int8 features equal this box's is
trusted as recorded. Any other int8 variant about to be chosen for the CPU is first run here against
the package's fp32 variant on the fidelity probe's inputs (generated, so every box feeds the same):
- where the package recorded that figure (`probe_error`), this box must reproduce it within the
  variant's drop threshold, read as points of the output range;
- where it did not (packages from before the figure was recorded), the mean error itself must stay
  within the threshold.
A variant that fails is passed over for the next choice, with the measured error as the reason, as a
variant flagged by the converter is. The measurement is stored in the state directory under the
variant's file checksums, the backend, device and precision, and the box's int8 features, so later
starts reuse it.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.hardware.facts import CpuInfo
from edge_runtime.measure.store import MeasurementStore, measurement_key
from edge_runtime.package.loader import ModelPackage
from edge_runtime.package.manifest import DEFAULT_DROP_THRESHOLD, Precision, Variant
from edge_runtime.placement.profiles import Choice
from edge_runtime.placement.variant_pick import CheckOutcome

log = logging.getLogger(__name__)

CHECKS_FILE = "int8-checks.json"
CHECKS_VERSION = 2
CPU_DELEGATES = (None, "xnnpack")


@dataclass(frozen=True)
class Measurement:
    """What one check measured: the variant's mean output error against fp32 here, as a fraction of the range."""

    variant_id: str
    mean_error: float
    box: tuple[str, ...]
    checked_at: str


@dataclass(frozen=True)
class Verdict:
    measurement: Measurement
    recorded: float | None  # the probe figure edge-convert recorded, if any
    allowed: float  # the most the error may exceed the recorded figure (or zero), as a fraction of the range
    measured_on: tuple[str, ...] | None

    @property
    def passed(self) -> bool:
        return self.measurement.mean_error - (self.recorded or 0.0) <= self.allowed

    def describe(self) -> str:
        """E.g. 'moves its outputs 7.3% of their range from fp32 on this CPU (x86_64 avx2), against 0.5% where ...'."""
        if self.passed:
            recorded = "none recorded" if self.recorded is None else f"{_percent(self.recorded)} recorded"
            return (
                f"int8 checked on this CPU ({' '.join(self.measurement.box)}): outputs "
                f"{_percent(self.measurement.mean_error)} of their range from fp32, {recorded}"
            )
        here = f"moves its outputs {_percent(self.measurement.mean_error)} of their range from fp32 on this CPU "
        here += f"({' '.join(self.measurement.box)})"
        if self.recorded is None:
            return f"{here}, more than its drop threshold of {_percent(self.allowed)} (no figure recorded to compare)"
        where = " ".join(self.measured_on) if self.measured_on else "an unrecorded CPU"
        return (
            f"{here}, against {_percent(self.recorded)} where edge-convert measured it ({where}): its recorded "
            f"accuracy does not hold here (at most {_percent(self.allowed)} more allowed)"
        )


class Int8Checks:
    """The check selection asks before it takes an int8 variant for the CPU; see the module docstring."""

    def __init__(self, state_dir: Path | None, cpu: CpuInfo) -> None:
        self.store = MeasurementStore(state_dir, CHECKS_FILE, CHECKS_VERSION, "int8 checks")
        self.cpu = cpu
        self._measured: dict[str, Measurement] = {}

    def __call__(self, package: ModelPackage, variant_id: str, choice: Choice) -> CheckOutcome | None:
        """Whether the variant's recorded accuracy holds on this box's CPU; None where no check applies."""
        variant = package.manifest.variants[variant_id]
        if not self.applies(variant, choice):
            return None
        verdict = self.verdict(package, variant_id, choice)
        return None if verdict is None else CheckOutcome(verdict.passed, verdict.describe())

    def applies(self, variant: Variant, choice: Choice) -> bool:
        """An int8 variant for the CPU, measured on a CPU with other int8 features or on an unrecorded one."""
        on_cpu = choice.device.upper() == "CPU" and choice.delegate in CPU_DELEGATES
        measured_on = variant.measured_on.int8_features if variant.measured_on else None
        return variant.precision is Precision.INT8 and on_cpu and measured_on != self.cpu.int8_features

    def verdict(self, package: ModelPackage, variant_id: str, choice: Choice) -> Verdict | None:
        """The judgement of the stored or a new measurement; None where the variant cannot be measured here."""
        variant = package.manifest.variants[variant_id]
        key = self._key(variant, choice)
        measurement = self._measured.get(key) or self._stored(key)
        if measurement is None:
            measurement = self._measure(package, variant_id, choice)
            if measurement is None:
                return None
            self.store.put(key, asdict(measurement))
            log.info(
                "model %s: %s moves its outputs %s of their range from fp32 on this CPU (recorded: %s)",
                package.name,
                variant_id,
                _percent(measurement.mean_error),
                _percent(variant.accuracy["probe_error"]) if "probe_error" in variant.accuracy else "none",
            )
        self._measured[key] = measurement
        threshold = variant.accuracy.get("drop_threshold", DEFAULT_DROP_THRESHOLD)
        measured_on = variant.measured_on.int8_features if variant.measured_on else None
        return Verdict(measurement, variant.accuracy.get("probe_error"), threshold / 100, measured_on)

    def _key(self, variant: Variant, choice: Choice) -> str:
        identity = {
            "files": [f.sha256 for f in variant.files],
            "backend": choice.backend,
            "device": choice.device.upper(),
            "precision": choice.precision.value if choice.precision else None,
            "box": list(self.cpu.int8_features),
        }
        return measurement_key(identity)

    def _measure(self, package: ModelPackage, variant_id: str, choice: Choice) -> Measurement | None:
        from edge_runtime.measure.fidelity import compare, load_reference
        from edge_runtime.placement.model import load_model

        box = self.cpu.int8_features
        log.info("model %s: checking %s on this CPU (%s) against fp32", package.name, variant_id, " ".join(box))
        try:
            reference = load_reference(package, variant_id)
        except EdgeRuntimeError as error:
            log.warning("model %s: cannot check %s on this CPU: %s", package.name, variant_id, error)
            return None
        try:
            model = load_model(package, variant_id, choice.backend, choice.backend_options())
            try:
                report = compare(model, reference)
            finally:
                model.close()
        except EdgeRuntimeError as error:  # a variant that does not load fails again, with its reason, at load
            log.warning("model %s: cannot check %s on this CPU: %s", package.name, variant_id, error)
            return None
        finally:
            reference.close()
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return Measurement(variant_id, report.mean_rel_error, box, now)

    def _stored(self, key: str) -> Measurement | None:
        entry = self.store.get(key)
        if entry is None:
            return None
        try:
            return Measurement(
                str(entry["variant_id"]), float(entry["mean_error"]), tuple(entry["box"]), str(entry["checked_at"])
            )
        except (KeyError, TypeError, ValueError):
            return None


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.2g}%" if fraction < 0.1 else f"{100 * fraction:.1f}%"
