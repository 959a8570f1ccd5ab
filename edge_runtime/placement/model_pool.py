"""Loaded models shared between pipelines.

Several cameras watching with the same model on the same settings share one loaded model (one
compiled network, one set of weights in memory); each pipeline still gets its own async runner.
Where a rollout has made another release of a configured package active, that release is what loads
(see `package.store`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_runtime.backends import backend_class
from edge_runtime.config import ModelConfig
from edge_runtime.measure.fidelity import DEFAULT_TOLERANCE
from edge_runtime.package.loader import ModelPackage, open_package
from edge_runtime.package.store import ModelStore
from edge_runtime.package.trust import TrustPolicy
from edge_runtime.placement.fastest import FastestChoices
from edge_runtime.placement.loading import Box, load_selected, select_for
from edge_runtime.placement.model import LoadedModel
from edge_runtime.placement.selection import Overrides, Selection

log = logging.getLogger(__name__)


@dataclass
class _Shared:
    model: LoadedModel
    users: set[str] = field(default_factory=set)
    release: int | None = None  # the signed release loaded; None when signatures are not required


class ModelPool:
    def __init__(
        self,
        box: Box,
        state_dir: Path,
        cache_dir: Path,
        trust: TrustPolicy | None = None,
        fastest: FastestChoices | None = None,
    ) -> None:
        """`trust`: when it requires signatures, every package is verified before it is opened, and a
        refused one raises PackageRefused instead of loading. `fastest`: where a model set to
        `select: fastest` without a stored choice is sent to be measured."""
        self.box = box
        self.fastest = fastest
        self.state_dir = state_dir
        self.cache_dir = cache_dir
        self.trust = trust
        self.store = ModelStore(state_dir)
        self._models: dict[str, _Shared] = {}
        self._user_key: dict[str, str] = {}

    def acquire(
        self,
        user: str,
        config: ModelConfig,
        config_file: Path,
        *,
        unpaced: bool = False,
        options: Mapping[str, Any] | None = None,
        share_any_pace: bool = False,
        record_release: bool = True,
        downgrade_to: int | None = None,
    ) -> LoadedModel:
        """The model for `user` (a pipeline, or a served model), loaded once per distinct model and settings.

        `unpaced`: the pipeline's input is ready as fast as it is taken (see `SourceConfig.unpaced`), so the
        throughput hint applies unless the config or the device profile names a hint. `options` are backend
        options the user needs (a dynamic batch dimension for a served model), part of what is shared.
        `share_any_pace`: take the model already loaded with these settings whatever hint its pace gave it
        (a served model joins a camera pipeline's rather than loading the model a second time).
        `record_release`: a signed release raises the lowest release later loads accept; a rollout defers
        that until it commits, so that rolling back to the release before stays possible. `downgrade_to`: the
        lower release an operator's signed command asked for, which the signature check then accepts.
        """
        path = self.resolve(config.path if config.path.is_absolute() else config_file.parent / config.path)
        signed = self.trust.check(path, downgrade_to=downgrade_to) if self.trust is not None else None
        package = open_package(path)
        overrides = Overrides(config.backend, config.device, config.precision, config.variant)
        selection = select_for(package, self.box, overrides, self.state_dir)
        defaults = _source_defaults(selection, config, unpaced)
        if config.select == "fastest":
            self._measure_unless_stored(package, selection, overrides, config, defaults)
        settings = config.model_dump_json(include=set(ModelConfig.model_fields) - {"path", "max_in_flight", "select"})
        chosen = selection.chosen
        runs = f"{chosen.choice.label()} {chosen.variant_id}" if chosen else ""
        same_model = f"{path.resolve()}|{settings}|{runs}|{sorted((options or {}).items())}"
        key = f"{same_model}|{defaults}"
        shared = self._models.get(key)
        if shared is None and share_any_pace:
            key, shared = next(((k, m) for k, m in self._models.items() if k.startswith(same_model + "|")), (key, None))
        if shared is None:
            extra = {
                "threads": config.threads,
                "hint": config.hint,
                "cache_dir": str(self.cache_dir),
                **(options or {}),
            }
            model, _ = load_selected(package, selection, extra, config.fidelity_tolerance, defaults)
            shared = self._models[key] = _Shared(model, release=signed.release if signed else None)
            if self.trust is not None and record_release:
                self.trust.loaded(signed)
        else:
            log.info("the model for %s is already loaded for %s: shared", user, ", ".join(sorted(shared.users)))
        shared.users.add(user)
        self._user_key[user] = key
        return shared.model

    def _measure_unless_stored(
        self,
        package: ModelPackage,
        selection: Selection,
        overrides: Overrides,
        config: ModelConfig,
        defaults: Mapping[str, str],
    ) -> None:
        chosen = selection.chosen
        if self.fastest is None or (chosen is not None and chosen.origin == "stored"):
            return
        hint = config.hint or defaults.get("hint") or (chosen.choice.hint if chosen else None) or "latency"
        tolerance = config.fidelity_tolerance or DEFAULT_TOLERANCE
        self.fastest.request(package, overrides, "throughput" if hint == "throughput" else "latency", tolerance)

    def resolve(self, path: Path) -> Path:
        """The package at `path`, or the release of it a rollout made active on this box."""
        resolved = self.store.resolve(path)
        if resolved != path:
            log.info("package at %s: release %s is active on this box", path, resolved.name)
        return resolved

    def describe(self) -> list[dict[str, Any]]:
        """The models loaded now: package, version, signed release, variant, where they run, and who uses them."""
        described = []
        for shared in list(self._models.values()):
            model, runs_on = shared.model, shared.model.backend.runs_on
            described.append(
                {
                    "package": model.package.name,
                    "version": model.package.manifest.version,
                    "release": shared.release,
                    "variant": model.variant_id,
                    "runs_on": f"{runs_on.backend}:{runs_on.device} {runs_on.precision}",
                    "users": sorted(shared.users),
                }
            )
        return described

    def rename(self, user: str, new_user: str) -> None:
        """Hand `user`'s model to `new_user` (a rollout's model becomes the pipeline's once committed)."""
        key = self._user_key.pop(user)
        shared = self._models[key]
        shared.users.discard(user)
        shared.users.add(new_user)
        self._user_key[new_user] = key

    def release(self, user: str) -> None:
        key = self._user_key.pop(user, None)
        shared = self._models.get(key) if key else None
        if shared is None or key is None:
            return
        shared.users.discard(user)
        if not shared.users:
            shared.model.close()
            del self._models[key]

    def close(self) -> None:
        for user in list(self._user_key):
            self.release(user)


def _source_defaults(selection: Selection, config: ModelConfig, unpaced: bool) -> dict[str, str]:
    """Options the source's pace asks for, only where they would take effect: the chosen backend must
    read the hint, and the config or the profile's choice may name one already. Settings that change
    nothing stay out of the sharing key, so such pipelines still share one loaded model."""
    chosen = selection.chosen
    if not unpaced or config.hint is not None or chosen is None or chosen.choice.hint is not None:
        return {}
    return {"hint": "throughput"} if backend_class(chosen.choice.backend).reads_hint else {}
