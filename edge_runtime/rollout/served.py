"""The rollout steps for models that answer requests (`serve:`), beside the pipelines' steps.

Requests are not a stream a shadow can follow, so a served model's new release is judged before the
switch on what needs no live input, its fidelity to its own fp32 variant (as the shadow judges a
pipeline's), and during probation on its answers: a request that fails counts as an error. The switch
itself is `Serving.take_release`, which loads the release the store marks active; a rollback marks the
release before active and takes it again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.placement.model_pool import ModelPool
from edge_runtime.rollout.shadow import fidelity_of
from edge_runtime.serving.service import Serving

__all__ = ["check_served", "served_failures", "served_models"]


def served_models(serving: Serving | None, package: str) -> list[str]:
    if serving is None:
        return []
    return sorted(name for name, served in serving.models.items() if served.model.package.name == package)


def check_served(
    serving: Serving, pool: ModelPool, name: str, path: Path, release: int, tolerance: float, rollout_id: str
) -> tuple[dict[str, Any], str | None]:
    """The new release loaded as the served model `name` loads, and its fidelity checked: (summary, failure)."""
    config = next(c for c in serving.settings.models if c.name == name)
    user = f"rollout:{rollout_id}:serve:{name}"
    try:
        model = pool.acquire(
            user, config.model_copy(update={"path": path}), serving.config_file, unpaced=True,
            record_release=False, downgrade_to=release,
        )  # fmt: skip
    except EdgeRuntimeError as error:
        return {"passed": False}, f"the new release does not load for served model {name}: {error}"
    try:
        largest, failure = fidelity_of(model, tolerance)
    finally:
        pool.release(user)
    summary = {"passed": failure is None, "fidelity_error": largest}
    return summary, None if failure is None else f"served model {name}: {failure}"


def served_failures(serving: Serving | None, names: list[str]) -> int:
    """Requests answered with an error so far, over the served models `names`."""
    if serving is None:
        return 0
    report = serving.report()
    return sum(int(report[name]["request_failure"]) for name in names if name in report)
