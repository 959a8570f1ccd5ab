"""Which of a package's variants a backend choice runs: loadable, at the precision asked, and fit to ship.

The choice lists variant patterns best first; the first variant that matches one, that the backend can
load, and whose precision fits is taken. A variant the converter flagged "do not ship" (its recorded
accuracy drop beyond the recorded threshold) is passed over for the next, unless the user named it; so
is a variant that a `VariantCheck` (the int8 check on this box's CPU) refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import NamedTuple, Protocol

from edge_runtime.backends import BACKENDS
from edge_runtime.hardware.facts import Hardware
from edge_runtime.package.loader import ModelPackage
from edge_runtime.package.manifest import Precision, Variant
from edge_runtime.placement.profiles import Choice


def precision_fits(variant: Precision, asked: Precision | None) -> bool:
    """Whether a variant can run at the precision a choice asks for.

    The asked precision is that of the float arithmetic. int8 asks for a quantized variant; fp32 asks
    for float results computed at full precision, so it excludes quantized variants; fp16 and bf16 may
    run any variant, an int8 one keeping its quantized ops and doing the rest at that precision.
    """
    if asked is None:
        return True
    if asked is Precision.INT8:
        return variant is Precision.INT8
    if asked is Precision.FP32:
        return variant is not Precision.INT8
    return True


class CheckOutcome(NamedTuple):
    passed: bool
    description: str  # why the variant may not run here, or what the check found


class VariantCheck(Protocol):
    """Whether a variant may run for a choice on this box (e.g. its int8 accuracy holds here); None: not checked.

    Asked only of the variant about to be taken, since answering may mean running it.
    """

    def __call__(self, package: ModelPackage, variant_id: str, choice: Choice) -> CheckOutcome | None: ...


class VariantPick(NamedTuple):
    """The variant a choice runs, or why none; and the flagged variants it passed over or was asked to run."""

    variant_id: str | None
    problem: str | None
    passed_over: tuple[str, ...] = ()  # "tflite/int8, which lost 3.2 points ..."
    flagged_but_requested: str | None = None  # why the converter said not to ship the variant the user named
    checked: str | None = None  # what the check on this box found for the variant taken

    def remarks(self) -> str:
        if self.flagged_but_requested is not None:
            return f" (requested although it {self.flagged_but_requested})"
        notes = [f"passed over {'; '.join(self.passed_over)}"] if self.passed_over else []
        notes += [self.checked] if self.checked else []
        return f" ({'; '.join(notes)})" if notes else ""


def accuracy_refusal(variant: Variant) -> str | None:
    """Why the converter said not to ship `variant` (e.g. 'lost 3.2 points of top-1 ...'), or None."""
    drop = variant.accuracy_drop
    return drop.describe() if drop is not None and drop.too_large else None


def pick_variant(
    package: ModelPackage,
    choice: Choice,
    hardware: Hardware,
    requested: str | None = None,
    check: VariantCheck | None = None,
) -> VariantPick:
    """The first of the choice's preferred variants that the package has, the backend can run, and may be shipped.

    A variant flagged by its accuracy drop, or refused by `check`, is passed over unless it is the one
    `requested` by the user.
    """
    variants = package.manifest.variants
    edgetpu = choice.delegate == "edgetpu"
    loadable = [
        vid
        for vid, v in variants.items()
        if v.format in BACKENDS[choice.backend].formats and (v.target == "edgetpu") == edgetpu
    ]
    has = ", ".join(variants)
    if not loadable:
        what = "Edge TPU-compiled variant" if edgetpu else f"variant for {choice.backend}"
        return VariantPick(None, f"no {what} in package (has: {has})")
    fitting = [vid for vid in loadable if precision_fits(variants[vid].precision, choice.precision)]
    capabilities = hardware.openvino_capabilities(choice.device) if choice.backend == "openvino" else None
    if capabilities is not None and "INT8" not in capabilities:  # e.g. GPUs older than Iris Xe
        fitting = [vid for vid in fitting if variants[vid].precision is not Precision.INT8]
    refusals = {vid: why for vid in fitting if (why := accuracy_refusal(variants[vid])) is not None}
    recheck = (lambda vid: check(package, vid, choice)) if check is not None else None
    return _first_match(choice.variant_patterns, fitting, refusals, requested, recheck) or VariantPick(
        None, _nothing_matches(choice, has, capabilities)
    )


def _first_match(
    patterns: tuple[str, ...],
    fitting: list[str],
    refusals: dict[str, str],
    requested: str | None,
    recheck: Callable[[str], CheckOutcome | None] | None,
) -> VariantPick | None:
    """The first fitting variant a pattern matches, passing over refused ones; None if no pattern matches any."""
    passed_over: dict[str, str] = {}
    for pattern in patterns:
        for vid in fitting:
            if not fnmatchcase(vid, pattern) or vid in passed_over:
                continue
            why = refusals.get(vid)
            checked = recheck(vid) if why is None and vid != requested and recheck is not None else None
            if checked is not None and not checked.passed:
                why = checked.description
            if vid == requested or why is None:
                flagged = why if vid == requested else None
                passed = tuple(f"{v}, which {w}" for v, w in passed_over.items())
                return VariantPick(vid, None, passed, flagged, checked.description if checked else None)
            passed_over[vid] = why
    if passed_over:
        return VariantPick(None, "; ".join(f"variant {vid} {why}" for vid, why in passed_over.items()))
    return None


def _nothing_matches(choice: Choice, has: str, capabilities: tuple[str, ...] | None) -> str:
    asked = f" at {choice.precision.value} or higher" if choice.precision else ""
    if choice.precision is Precision.INT8:
        asked = " at int8 (a quantized variant)"
    lacks_int8 = capabilities is not None and "INT8" not in capabilities
    no_int8 = f"; {choice.device} lacks INT8 in OPTIMIZATION_CAPABILITIES" if lacks_int8 else ""
    wanted = ", ".join(choice.variant_patterns)
    return f"no variant matching {wanted}{asked} for {choice.backend} (package has: {has}){no_int8}"
