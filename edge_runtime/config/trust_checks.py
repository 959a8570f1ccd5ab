"""Checks of the keys a config names and of the signatures a box that requires them would check.

A box that cannot read its keys refuses every model (`trust`) or every command (`control`), and one that
requires signed packages refuses at start a model whose signature does not verify: `check-config` says
so first, with the field that names the key or the model.
"""

from __future__ import annotations

from pathlib import Path

from edge_runtime.config.parts import ConfigParts, PipelinePart
from edge_runtime.config.problems import FieldPath, Problem
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.store import ModelStore

__all__ = ["check_keys", "check_signatures"]


def check_keys(parts: ConfigParts) -> list[Problem]:
    """Every key file must hold an Ed25519 public key: a box that cannot read its keys refuses every model
    (trust) or every command (control)."""
    from edge_runtime.package.signing import read_public_key

    problems = []
    sections = [
        ("trust", parts.trust.keys if parts.trust else ()),
        ("control", parts.control.keys if parts.control else ()),
    ]
    for section, keys in sections:
        for index, key in enumerate(keys):
            if isinstance(key, Path):
                try:
                    read_public_key(key)
                except EdgeRuntimeError as error:
                    problems.append(Problem((section, "keys", index), str(error)))
    return problems


def check_signatures(
    parts: ConfigParts, pipelines: list[PipelinePart], already: set[FieldPath | None]
) -> list[Problem]:
    """The check `run` makes before loading each model, for the models not already found wanting."""
    from edge_runtime.package.trust import TrustPolicy

    assert parts.trust is not None and parts.state_dir is not None
    policy = TrustPolicy.from_settings(parts.trust, parts.state_dir)
    store = ModelStore(parts.state_dir)  # a release a rollout made active is what `run` loads, and checks
    models: list[tuple[FieldPath, str, Path]] = [
        ((*part.at, "model", "path"), f"pipeline '{part.name}'", part.model.path)
        for part in pipelines
        if part.model is not None
    ]
    models += [
        (
            (*part.at, "cascade", index, "model", "path"),
            f"pipeline '{part.name}' cascade stage '{stage.name}'",
            stage.model.path,
        )
        for part in pipelines
        if part.whole is not None
        for index, stage in enumerate(part.whole.cascade)
    ]
    models += [
        (("serve", "models", index, "path"), f"served model '{model.name}'", model.path)
        for index, model in parts.served
    ]
    problems = []
    for where, label, path in models:
        if where in already:
            continue
        try:
            policy.check(store.resolve(path))
        except EdgeRuntimeError as error:
            problems.append(Problem(where, f"{label}: {error}"))
    return problems
