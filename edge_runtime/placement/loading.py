"""Placing a model on this box: detect, match a profile, select, and load with fallback.

This is what `probe`, `bench` and the daemon share: the box is looked at once, and loading walks
the selection's runnable candidates in order, so an NPU that fails to compile a model hands it to
the next choice instead of stopping the service.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.hardware import detect
from edge_runtime.hardware.facts import Hardware
from edge_runtime.measure.int8_check import Int8Checks
from edge_runtime.package.loader import ModelPackage
from edge_runtime.placement.model import LoadedModel, load_model
from edge_runtime.placement.profiles import ProfileMatch, load_profiles, match_profile
from edge_runtime.placement.selection import Candidate, Overrides, Selection, load_stored_choice, model_key, select

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Box:
    hardware: Hardware
    match: ProfileMatch


def look_at_box(root: Path | str = "/", profile_dirs: Sequence[Path] = (), isolated: bool = False) -> Box:
    """The box's hardware and matching profile; `isolated` keeps unused backend libraries out of this process."""
    hardware = detect(root, isolated=isolated)
    return Box(hardware=hardware, match=match_profile(hardware, load_profiles(profile_dirs)))


def select_for(
    package: ModelPackage, box: Box, overrides: Overrides | None = None, state_dir: Path | None = None
) -> Selection:
    """The selection for this box; an int8 variant for the CPU is checked here first where its CPU differed."""
    stored = load_stored_choice(state_dir, model_key(package)) if state_dir is not None else None
    check = Int8Checks(state_dir, box.hardware.cpu)
    return select(package, box.hardware, profile=box.match.profile, overrides=overrides, stored=stored, check=check)


def load_candidate(
    package: ModelPackage,
    candidate: Candidate,
    extra_options: Mapping[str, Any] | None = None,
    default_options: Mapping[str, Any] | None = None,
) -> LoadedModel:
    """Load a candidate; `extra_options` (threads, hint, cache_dir...) override the profile's where not None,
    and `default_options` apply where neither sets a value."""
    if candidate.variant_id is None:
        raise EdgeRuntimeError(f"{candidate.choice.label()} has no variant to load: {candidate.reason}")
    extra = {key: value for key, value in (extra_options or {}).items() if value is not None}
    options = dict(default_options or {}) | candidate.backend_options() | extra
    return load_model(package, candidate.variant_id, candidate.choice.backend, options)


def load_selected(
    package: ModelPackage,
    selection: Selection,
    extra_options: Mapping[str, Any] | None = None,
    fidelity_tolerance: float | None = None,
    default_options: Mapping[str, Any] | None = None,
) -> tuple[LoadedModel, Candidate]:
    """Load the chosen candidate, moving down the runnable ones when a load (or the fidelity check) fails."""
    failures = []
    for candidate in selection.runnable():
        try:
            model = load_candidate(package, candidate, extra_options, default_options)
            if fidelity_tolerance is not None:
                _check_fidelity(package, model, fidelity_tolerance)
            return model, candidate
        except EdgeRuntimeError as error:
            log.warning("%s could not load %s: %s", candidate.choice.label(), package.name, error)
            failures.append(f"{candidate.choice.label()}: {error}")
    if not failures:
        raise EdgeRuntimeError(f"nothing can run model {package.name} on this box:\n{selection.explain()}")
    raise EdgeRuntimeError(f"every runnable choice failed to load model {package.name}:\n  " + "\n  ".join(failures))


def _check_fidelity(package: ModelPackage, model: LoadedModel, tolerance: float) -> None:
    from edge_runtime.measure.fidelity import compare, load_reference

    reference = load_reference(package, model.variant_id)
    try:
        report = compare(model, reference, tolerance=tolerance)
    finally:
        reference.close()
    try:
        report.raise_if_failed()
    except EdgeRuntimeError:
        model.close()
        raise
    log.info("%s matches the fp32 reference within %.2g%% of its output range", model.label, 100 * report.max_rel_error)
