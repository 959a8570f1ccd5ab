"""Choosing how to run a model on this box, with a reason for every choice not taken.

The matched profile lists backend choices best first. Each is checked against what is really there:
the hardware fact it requires, the backend library and the device that library lists, and a variant
of the package that the backend can load at the precision asked. The first choice that passes is
taken; the later ones that pass stay in the list, so the runtime can move on to them when loading
the first one fails (an NPU compile error, a TensorRT build running out of memory). A choice stored
by `bench --select` for this model goes first while it still passes. When nothing in the profile
passes, every backend is tried on the CPU as a last resort, and the selection says so.

A variant the converter flagged "do not ship" (its recorded accuracy drop beyond the recorded
threshold) is passed over for the next variant or choice, with the drop as the reason; only a user
who names that variant (`--variant`, or `model.variant` in a pipeline) gets it, with a warning. The
same holds for a variant refused by the `check` given to `select` (the int8 check on this box's CPU,
`edge_runtime.measure.int8_check`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from edge_runtime.backends import BACKENDS, BackendKey, backend_class
from edge_runtime.backends.base import BackendStatus
from edge_runtime.config.base import describe_validation_error
from edge_runtime.durable import replace_file
from edge_runtime.errors import ConfigError
from edge_runtime.hardware.facts import FACT_MISSING, Fact, Hardware
from edge_runtime.package.loader import ModelPackage
from edge_runtime.package.manifest import Precision
from edge_runtime.placement.profiles import Choice, DeviceProfile
from edge_runtime.placement.variant_pick import VariantCheck, VariantPick, accuracy_refusal, pick_variant

log = logging.getLogger(__name__)

Origin = Literal["stored", "override", "profile", "fallback"]
# Who measured a stored choice: an operator's `bench --select`, or the box itself for a model set to `select: fastest`.
ChosenBy = Literal["bench --select", "select: fastest"]
Status = Literal["taken", "runnable", "skipped"]

DELEGATE_FACTS: dict[str, Fact] = {"edgetpu": "edgetpu"}
# When nothing in the profile runs, the order backends are tried on the CPU: the broadest reader first.
FALLBACK_BACKENDS: tuple[BackendKey, ...] = ("openvino", "onnxruntime", "litert")
STORE_FILE = "selections.json"
STORE_VERSION = 1


@dataclass(frozen=True)
class Overrides:
    """What the user pinned on the command line; each one narrows the profile's choices."""

    backend: str | None = None
    device: str | None = None
    precision: Precision | None = None
    variant: str | None = None

    def __post_init__(self) -> None:
        """Accept a precision spelt as on the command line ("int8") as well as the enum."""
        value: object = self.precision
        if value is not None and not isinstance(value, Precision):
            try:
                object.__setattr__(self, "precision", Precision(value))
            except ValueError:
                known = ", ".join(p.value for p in Precision)
                raise ConfigError(f"unknown precision {value!r}; expected one of {known}") from None

    def active(self) -> bool:
        return any(value is not None for value in (self.backend, self.device, self.precision, self.variant))

    def excludes(self, choice: Choice) -> str | None:
        if self.backend is not None and choice.backend != self.backend:
            return f"not requested (--backend {self.backend})"
        if self.device is not None and choice.device.upper() != self.device.upper():
            return f"not requested (--device {self.device})"
        return None

    def apply(self, choice: Choice) -> Choice:
        update: dict[str, Any] = {}
        if self.precision is not None:
            update["precision"] = self.precision
        if self.variant is not None:
            update["variants"] = (self.variant,)
        return choice.model_copy(update=update) if update else choice

    def as_choice(self) -> Choice:
        """The choice the user described, for when the profile has none like it."""
        assert self.backend is not None
        fields = {
            "backend": self.backend,
            "device": self.device or "CPU",
            "precision": self.precision,
            "variants": [self.variant] if self.variant else [],
        }
        try:
            return Choice.model_validate(fields)
        except ValidationError as error:
            problems = "; ".join(describe_validation_error(error))
            raise ConfigError(f"invalid backend override: {problems}") from None


@dataclass(frozen=True)
class StoredChoice:
    """The fastest faithful choice measured for one model on this box, and who measured it."""

    choice: Choice
    variant_id: str
    stored_at: str
    metrics: Mapping[str, float]
    chosen_by: ChosenBy = "bench --select"


@dataclass(frozen=True)
class Candidate:
    choice: Choice
    origin: Origin
    status: Status
    reason: str
    variant_id: str | None = None
    device_name: str | None = None

    @property
    def runnable(self) -> bool:
        return self.status != "skipped"

    def backend_options(self) -> dict[str, Any]:
        return self.choice.backend_options()

    def to_dict(self) -> dict[str, Any]:
        choice = self.choice
        return {
            "origin": self.origin,
            "status": self.status,
            "reason": self.reason,
            "backend": choice.backend,
            "device": choice.device,
            "device_name": self.device_name,
            "delegate": choice.delegate,
            "precision": choice.precision.value if choice.precision else None,
            "variant": self.variant_id,
            "options": self.backend_options(),
        }


@dataclass(frozen=True)
class Selection:
    model: str
    profile: str | None
    candidates: tuple[Candidate, ...]

    @property
    def chosen(self) -> Candidate | None:
        return next((c for c in self.candidates if c.status == "taken"), None)

    def runnable(self) -> list[Candidate]:
        """The chosen candidate and those that may replace it if it fails to load, in order."""
        return [c for c in self.candidates if c.runnable]

    def to_dict(self) -> dict[str, Any]:
        chosen = self.chosen
        return {
            "model": self.model,
            "profile": self.profile,
            "chosen": self.candidates.index(chosen) if chosen else None,
            "candidates": [c.to_dict() for c in self.candidates],
        }

    def explain(self) -> str:
        lines = [f"model {self.model}, profile {self.profile or '(none matched)'}"]
        lines += [f"  {i}. {c.choice.label():<32} {c.reason}" for i, c in enumerate(self.candidates, 1)]
        if self.chosen is None:
            lines.append("  nothing can run this model here")
        return "\n".join(lines)


@dataclass(frozen=True)
class _Context:
    package: ModelPackage
    hardware: Hardware
    statuses: Mapping[str, BackendStatus]
    check: VariantCheck | None


def select(
    package: ModelPackage,
    hardware: Hardware,
    statuses: Mapping[str, BackendStatus] | None = None,
    profile: DeviceProfile | None = None,
    overrides: Overrides | None = None,
    stored: StoredChoice | None = None,
    check: VariantCheck | None = None,
) -> Selection:
    """Rank the ways to run `package` here; `statuses` default to those detection recorded."""
    context = _Context(package, hardware, hardware.libraries if statuses is None else statuses, check)
    overrides = overrides or Overrides()
    planned: list[tuple[Origin, Choice]] = [("stored", stored.choice)] if stored else []
    planned += [("profile", choice) for choice in (profile.choices if profile else ())]
    if overrides.backend and all(overrides.excludes(c) for origin, c in planned if origin == "profile"):
        planned.append(("override", overrides.as_choice()))
    candidates = [_consider(origin, choice, overrides, context) for origin, choice in planned]
    if not any(c.runnable for c in candidates):
        candidates += _fallbacks(candidates, overrides, context)
    _warn_of_requested_flagged_variant(package, overrides.variant, candidates)
    taken_because = {"stored": f"taken (stored by {stored.chosen_by})"} if stored else {}
    return Selection(package.name, profile.name if profile else None, _mark_taken(candidates, profile, taken_because))


def _warn_of_requested_flagged_variant(package: ModelPackage, requested: str | None, found: list[Candidate]) -> None:
    """Once per selection: a variant named by the user runs even when the converter said not to ship it."""
    variant = package.manifest.variants.get(requested) if requested else None
    why = accuracy_refusal(variant) if variant is not None else None
    if why is not None and any(c.runnable and c.variant_id == requested for c in found):
        log.warning("model %s: running variant %s as requested, although it %s", package.name, requested, why)


def _fallbacks(earlier: list[Candidate], overrides: Overrides, context: _Context) -> list[Candidate]:
    """Every backend on the CPU, fp32 variants first; a failed one is listed only if not tried already."""
    tried = {(c.choice.backend, c.choice.device.upper()) for c in earlier}
    found = []
    for key in FALLBACK_BACKENDS:
        native_order = BACKENDS[key].default_variants
        fp32_first = tuple(pattern.replace("/*", "/fp32") for pattern in native_order) + native_order
        choice = Choice(backend=key, device="CPU", variants=fp32_first)
        if overrides.excludes(choice) is None:
            candidate = _consider("fallback", choice, overrides, context)
            if candidate.runnable or (key, "CPU") not in tried:
                found.append(candidate)
    return found


def _consider(origin: Origin, choice: Choice, overrides: Overrides, context: _Context) -> Candidate:
    if excluded := overrides.excludes(choice):
        return Candidate(choice, origin, "skipped", f"skipped: {excluded}")
    choice = overrides.apply(choice)
    status = context.statuses.get(choice.backend)
    backend = backend_class(choice.backend)
    where = (choice.device, choice.delegate, choice.options)
    problem = _missing_fact(choice, context.hardware) or _library_problem(choice.backend, status)
    if problem is None and status is not None:
        problem = backend.device_problem(*where, status, context.hardware)
    pick = VariantPick(None, problem)
    if problem is None:
        pick = pick_variant(context.package, choice, context.hardware, overrides.variant, context.check)
        problem = pick.problem
    if problem is not None or status is None:
        if origin == "stored":
            problem = f"stored choice no longer runnable: {problem}"
        return Candidate(choice, origin, "skipped", f"skipped: {problem}")
    device_name = backend.device_name(*where, status)
    runs = f"{choice.backend} on {choice.device}" + (f"+{choice.delegate}" if choice.delegate else "")
    runs += f" ({device_name})" if device_name else ""
    reason = f"{runs}, variant {pick.variant_id}{pick.remarks()}"
    return Candidate(choice, origin, "runnable", reason, pick.variant_id, device_name)


def _signature(candidate: Candidate) -> str:
    options = json.dumps(candidate.backend_options(), sort_keys=True, default=str)
    return f"{candidate.choice.backend} {options} {candidate.variant_id}"


def _mark_taken(
    candidates: list[Candidate], profile: DeviceProfile | None, taken_because: Mapping[str, str]
) -> tuple[Candidate, ...]:
    """The first runnable candidate is taken; a later one that would load the very same thing is dropped."""
    marked: list[Candidate] = []
    seen: dict[str, int] = {}
    taken = False
    for candidate in candidates:
        if candidate.runnable and _signature(candidate) in seen:
            same = seen[_signature(candidate)]
            candidate = replace(candidate, status="skipped", reason=f"skipped: same as choice {same} above")
        elif candidate.runnable:
            seen[_signature(candidate)] = len(marked) + 1
        if candidate.runnable and not taken:
            taken = True
            why = {
                "stored": "taken (stored by bench --select)",
                **taken_because,
                "override": "taken (as requested)",
                "profile": "taken",
                "fallback": f"taken as fallback (nothing in profile {profile.name if profile else '(none)'} "
                "is runnable)",
            }[candidate.origin]
            candidate = replace(candidate, status="taken", reason=f"{why}: {candidate.reason}")
        elif candidate.runnable:
            candidate = replace(candidate, reason=f"runnable, kept in reserve: {candidate.reason}")
        marked.append(candidate)
    return tuple(marked)


def _library_problem(backend: str, status: BackendStatus | None) -> str | None:
    if status is None:
        return f"library {backend} was not probed"
    if not status.available:
        return f"library {backend} not importable: {status.reason or 'no reason given'}"
    return None


def _missing_fact(choice: Choice, hardware: Hardware) -> str | None:
    required = list(choice.requires)
    if choice.delegate in DELEGATE_FACTS:
        required.append(DELEGATE_FACTS[choice.delegate])
    return next((FACT_MISSING[fact] for fact in required if fact not in hardware.facts), None)


def model_key(package: ModelPackage) -> str:
    """A digest of every variant's file checksums: a stored choice never outlives the files it was measured on."""
    files = {vid: [f.sha256 for f in v.files] for vid, v in sorted(package.manifest.variants.items())}
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def load_stored_choice(state_dir: Path | str, model_key: str) -> StoredChoice | None:
    path = Path(state_dir) / STORE_FILE
    entry = _read_store(path).get("models", {}).get(model_key)
    if entry is None:
        return None
    try:
        choice = Choice.model_validate(entry["choice"])
        variant_id = str(entry["variant"])
        metrics = {str(k): float(v) for k, v in dict(entry.get("metrics", {})).items()}
        chosen_by: ChosenBy = "select: fastest" if entry.get("chosen_by") == "select: fastest" else "bench --select"
    except ValidationError as error:
        problems = "; ".join(describe_validation_error(error))
        raise ConfigError(f"stored selection in {path}, model {model_key}: choice.{problems}") from None
    except (KeyError, TypeError, ValueError) as error:
        raise ConfigError(f"stored selection in {path}, model {model_key} is malformed: {error!r}") from None
    choice = choice.model_copy(update={"variants": (variant_id,)})
    return StoredChoice(choice, variant_id, str(entry.get("stored_at", "")), metrics, chosen_by)


def store_choice(
    state_dir: Path | str,
    model_key: str,
    choice: Choice,
    variant_id: str,
    metrics: Mapping[str, float] | None = None,
    chosen_by: ChosenBy = "bench --select",
) -> Path:
    """Record the choice for this model, replacing any before it; written atomically."""
    path = Path(state_dir) / STORE_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return _write_store(path, model_key, {
            "choice": choice.model_dump(mode="json", exclude_defaults=True),
            "variant": variant_id,
            "stored_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "metrics": dict(metrics or {}),
            "chosen_by": chosen_by,
        })  # fmt: skip
    except OSError as error:
        raise ConfigError(
            f"cannot store the choice in {path}: {error.strerror}; run as the service's user or pass --state-dir"
        ) from None


def _write_store(path: Path, model_key: str, entry: dict[str, Any]) -> Path:
    try:
        store = _read_store(path)
    except ConfigError:
        store = {}  # an unreadable store is what a new `bench --select` is meant to replace
    models = dict(store.get("models", {}))
    models[model_key] = entry
    text = json.dumps({"version": STORE_VERSION, "models": models}, indent=2, sort_keys=True)
    replace_file(path, text + "\n")
    return path


def _read_store(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise ConfigError(f"cannot read stored selections {path}: {error.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"stored selections {path} are not valid JSON ({error}); run bench --select again") from None
    if not isinstance(data, dict) or data.get("version") != STORE_VERSION or not isinstance(data.get("models"), dict):
        raise ConfigError(
            f"stored selections {path} are not version {STORE_VERSION} selections; run bench --select again"
        )
    return data
