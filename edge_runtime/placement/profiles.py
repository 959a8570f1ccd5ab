"""Device profiles: which boxes a profile is for, and the backend choices to try there, best first.

Profiles are data (`device_profiles/*.yaml`, shipped inside the package, plus any directory such as
/etc/edge-runtime/profiles that adds profiles or replaces one of the same name), so supporting a new
board is a YAML file, not code. The schema is strict, because a misspelt `requires:` would silently
turn an accelerator choice into one that is tried on every box. Of the profiles that match a box,
the one with the highest priority wins; the others are kept with the reasons they lost, so `probe`
can show why a box was not taken for a Jetson or a Coral box.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from edge_runtime.backends import BACKENDS, BackendKey
from edge_runtime.config.base import StrictModel, describe_validation_error
from edge_runtime.errors import ConfigError
from edge_runtime.hardware.cpu import normalise_arch
from edge_runtime.hardware.devices import DEVICE_NODE_GLOBS
from edge_runtime.hardware.facts import FACT_MISSING, FACTS, Fact, Hardware
from edge_runtime.package.manifest import Precision

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

PROFILE_PACKAGE = "edge_runtime.device_profiles"
SYSTEM_PROFILE_DIR = Path("/etc/edge-runtime/profiles")

CHOICE_FIELDS_NOT_IN_OPTIONS = ("device", "precision", "threads", "hint", "delegate")
_NAME = r"^[a-z0-9][a-z0-9._-]*$"


class MatchSpec(StrictModel):
    """Conditions a box must meet, all of them; an empty spec matches every box."""

    arch: tuple[str, ...] = ()
    cpu_vendor: tuple[str, ...] = ()
    cpu_flags: tuple[str, ...] = ()
    board_model: str | None = Field(default=None, description="Regular expression searched in the board model.")
    any_device: tuple[str, ...] = Field(default=(), description="Globs such as /dev/apex_*; one must exist.")
    usb_ids: tuple[str, ...] = ()
    igpu: bool | None = None
    npu: bool | None = None
    edgetpu: bool | None = None
    nvidia: bool | None = None
    jetson: bool | None = None

    @field_validator("arch")
    @classmethod
    def _normalise_arch(cls, arch: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(normalise_arch(a) for a in arch)

    @field_validator("board_model")
    @classmethod
    def _valid_regex(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"not a valid regular expression: {error}") from None
        return pattern

    @field_validator("any_device")
    @classmethod
    def _device_globs(cls, globs: tuple[str, ...]) -> tuple[str, ...]:
        """Detection records only some device nodes; a glob outside them would silently never match."""
        recorded = ["/" + family for family in DEVICE_NODE_GLOBS]
        for glob in globs:
            if not any(fnmatchcase(glob, family) for family in recorded):
                raise ValueError(f"{glob!r} is not among the device nodes detection records: {', '.join(recorded)}")
        return globs

    @field_validator("usb_ids")
    @classmethod
    def _usb_ids(cls, ids: tuple[str, ...]) -> tuple[str, ...]:
        for usb_id in ids:
            if not re.fullmatch(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{4}", usb_id):
                raise ValueError(f"{usb_id!r} is not a USB id like 1a6e:089a")
        return tuple(i.lower() for i in ids)

    def facts(self) -> dict[Fact, bool]:
        return {fact: wanted for fact in FACTS if (wanted := getattr(self, fact)) is not None}


class Choice(StrictModel):
    """One way to run a model: a backend on a device, with the variants it prefers, best first."""

    backend: BackendKey
    device: str = "CPU"
    precision: Precision | None = None
    threads: int | None = Field(default=None, ge=1)
    hint: Literal["latency", "throughput"] | None = None
    delegate: str | None = Field(default=None, min_length=1, description="LiteRT delegate, e.g. edgetpu.")
    variants: tuple[str, ...] = Field(default=(), description="Variant ids or globs, e.g. openvino/int8, onnx/*.")
    requires: tuple[Fact, ...] = ()
    options: dict[str, Any] = Field(default_factory=dict, description="Backend options, passed through.")

    @field_validator("requires", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> Choice:
        if self.delegate is not None and self.backend != "litert":
            raise ValueError(f"delegate is a LiteRT setting; backend {self.backend} has no delegates")
        for pattern in self.variants:
            self._check_pattern(pattern)
        for key in CHOICE_FIELDS_NOT_IN_OPTIONS:
            if key in self.options:
                raise ValueError(f"options.{key}: set {key} on the choice itself, not in options")
        return self

    def _check_pattern(self, pattern: str) -> None:
        if pattern == "*":
            return
        kind, sep, name = pattern.partition("/")
        if not sep or not kind or not name or "/" in name:
            raise ValueError(f"variant {pattern!r} must look like 'format/name', e.g. 'tflite/int8' or 'onnx/*'")
        loadable = {f.value for f in BACKENDS[self.backend].formats}
        if kind != "*" and kind not in loadable:
            raise ValueError(f"variant {pattern!r}: {self.backend} cannot load {kind} models")

    @property
    def variant_patterns(self) -> tuple[str, ...]:
        return self.variants or BACKENDS[self.backend].default_variants

    def label(self) -> str:
        """Short human name, e.g. 'openvino NPU', 'litert CPU+edgetpu', 'onnxruntime TENSORRT fp16'."""
        text = f"{self.backend} {self.device}" + (f"+{self.delegate}" if self.delegate else "")
        return text + (f" {self.precision.value}" if self.precision else "")

    def backend_options(self) -> dict[str, Any]:
        """The options mapping for `backends.make_options`: the choice's settings plus its `options`."""
        settings = {
            "device": self.device,
            "precision": self.precision.value if self.precision else None,
            "threads": self.threads,
            "hint": self.hint,
            "delegate": self.delegate,
        }
        return {key: value for key, value in settings.items() if value is not None} | dict(self.options)


class DeviceProfile(StrictModel):
    name: str = Field(pattern=_NAME)
    description: str = ""
    priority: int = Field(default=0, description="Specificity: of the profiles matching a box, highest wins.")
    match: MatchSpec = Field(default_factory=MatchSpec)
    choices: tuple[Choice, ...] = Field(min_length=1)
    _source: str = PrivateAttr(default="")

    @property
    def source(self) -> str:
        return self._source


def parse_profile(data: object, source: str, expected_name: str | None = None) -> DeviceProfile:
    if not isinstance(data, dict):
        raise ConfigError(f"invalid device profile {source}: (top level): expected a mapping of fields")
    try:
        profile = DeviceProfile.model_validate(data)
    except ValidationError as error:
        problems = "\n  ".join(describe_validation_error(error))
        raise ConfigError(f"invalid device profile {source}:\n  {problems}") from None
    if expected_name is not None and profile.name != expected_name:
        raise ConfigError(
            f"invalid device profile {source}:\n  name: {profile.name!r} must equal the file name {expected_name!r}"
        )
    profile._source = source
    return profile


def read_profile(file: Traversable | Path) -> DeviceProfile:
    source = str(file)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read device profile {source}: {error.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"invalid device profile {source}: not valid YAML: {error}") from None
    return parse_profile(data, source, expected_name=file.name.removesuffix(".yaml"))


def builtin_profiles() -> list[DeviceProfile]:
    """The profiles shipped inside the installed package (never read from a checkout-relative path)."""
    directory = files(PROFILE_PACKAGE)
    return [read_profile(f) for f in sorted(directory.iterdir(), key=lambda f: f.name) if f.name.endswith(".yaml")]


def load_profiles(extra_dirs: Iterable[Path | str] = (), include_system: bool = True) -> list[DeviceProfile]:
    """Built-in profiles, then /etc/edge-runtime/profiles (when it exists and `include_system`), then each
    extra directory in order; a later profile replaces an earlier one of the same name.
    """
    directories = [SYSTEM_PROFILE_DIR] if include_system and SYSTEM_PROFILE_DIR.is_dir() else []
    explicit = [Path(directory) for directory in extra_dirs]
    for directory in explicit:
        if not directory.is_dir():
            raise ConfigError(f"device profile directory {directory} does not exist")
    by_name = {profile.name: profile for profile in builtin_profiles()}
    for directory in directories + explicit:
        for path in sorted(directory.glob("*.yaml")):
            profile = read_profile(path)
            by_name[profile.name] = profile
    return list(by_name.values())


def mismatches(spec: MatchSpec, hardware: Hardware) -> list[str]:
    """Why a box fails a profile's conditions; empty when it meets all of them."""
    cpu = hardware.cpu
    reasons = []
    if spec.arch and cpu.arch not in spec.arch:
        reasons.append(f"arch {cpu.arch} is not {' or '.join(spec.arch)}")
    if spec.cpu_vendor and cpu.vendor not in spec.cpu_vendor:
        reasons.append(f"CPU vendor {cpu.vendor} is not {' or '.join(spec.cpu_vendor)}")
    if missing := [flag for flag in spec.cpu_flags if flag not in cpu.flags]:
        reasons.append(f"CPU lacks {', '.join(missing)}")
    if spec.board_model is not None:
        if hardware.board_model is None:
            reasons.append("no board model (no /proc/device-tree/model)")
        elif not re.search(spec.board_model, hardware.board_model):
            reasons.append(f"board model {hardware.board_model!r} does not match /{spec.board_model}/")
    if spec.any_device and not any(fnmatchcase(n, g) for g in spec.any_device for n in hardware.device_nodes):
        reasons.append(f"none of {', '.join(spec.any_device)} present")
    if spec.usb_ids and not hardware.usb_ids & set(spec.usb_ids):
        reasons.append(f"no USB device {' or '.join(spec.usb_ids)}")
    for fact, wanted in spec.facts().items():
        if wanted and fact not in hardware.facts:
            reasons.append(FACT_MISSING[fact])
        elif not wanted and fact in hardware.facts:
            reasons.append(f"has {fact}, and this profile is for boxes without one")
    return reasons


@dataclass(frozen=True)
class ProfileVerdict:
    name: str
    priority: int
    matched: bool  # the box meets every condition
    chosen: bool
    reasons: tuple[str, ...]  # why it does not match, or why a matching profile lost

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "priority": self.priority,
            "matched": self.matched,
            "chosen": self.chosen,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class ProfileMatch:
    profile: DeviceProfile | None  # None when no profile fits (selection then falls back to any CPU backend)
    verdicts: tuple[ProfileVerdict, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile.name if self.profile else None,
            "source": self.profile.source if self.profile else None,
            "verdicts": [verdict.to_dict() for verdict in self.verdicts],
        }


def match_profile(hardware: Hardware, profiles: Iterable[DeviceProfile]) -> ProfileMatch:
    """The matching profile of highest priority (ties go to the name first in order), with every verdict."""
    ranked = sorted(profiles, key=lambda p: (-p.priority, p.name))
    failures = {profile.name: mismatches(profile.match, hardware) for profile in ranked}
    best = next((profile for profile in ranked if not failures[profile.name]), None)
    verdicts = []
    for profile in ranked:
        reasons = failures[profile.name]
        matched = not reasons
        if matched and best is not None and profile is not best:
            reasons = [_outranked(profile, best)]
        verdicts.append(ProfileVerdict(profile.name, profile.priority, matched, profile is best, tuple(reasons)))
    return ProfileMatch(profile=best, verdicts=tuple(verdicts))


def _outranked(profile: DeviceProfile, best: DeviceProfile) -> str:
    if profile.priority == best.priority:
        return f"matches too, but {best.name} has the same priority ({best.priority}) and comes first by name"
    return f"matches too, but {best.name} has higher priority ({best.priority} > {profile.priority})"
