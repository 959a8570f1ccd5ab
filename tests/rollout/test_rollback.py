"""`rollback` by command on a live box: back through what ran committed, never to a release that was rejected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from live_rollout import FAST, Box, signed_release, versions_in_order, wait_for_results

from edge_runtime.config.rollout import RolloutSettings
from edge_runtime.control.handlers import CommandFailed, ControlContext, run_command
from edge_runtime.rollout.state import Stage


def control(box: Box) -> ControlContext:
    return ControlContext(
        config_file=box.root / "config.yaml", report=dict, reload=lambda: None, pipelines=lambda: {},
        disabled=list, set_enabled=lambda name, enabled: None, models=list, store=box.pool.store, rollouts=box.rollouts,
    )  # fmt: skip


def roll_back(box: Box, rollout_id: str) -> Any:
    run_command(control(box), "rollback", {"package": box.package, "rollout_id": rollout_id})
    record = box.rollouts.wait(120)
    assert record is not None and record.rollout_id == rollout_id
    return record


def test_rollback_skips_rejected_releases_and_returns_to_the_configs_package(box: Box, face_package_dir: Path) -> None:
    """2 committed, 3 rejected in its shadow, 4 committed: a rollback goes to 2, the next to the config's
    package (release 1, which the store never held), and a third finds nothing before."""
    for release in (2, 3, 4):
        slow = {"shadow": {"items": 8, "max_latency_ratio": 0.01}} if release == 3 else {}
        box.rollouts.settings = RolloutSettings.model_validate(FAST | slow)
        archive = signed_release(face_package_dir, box.root / f"v{release}", box.key, release, f"{release}.0")
        record = box.run(box.request(f"r-{release}", archive))
        assert record.stage is (Stage.ROLLED_BACK if release == 3 else Stage.COMMITTED), record.reason
    box.rollouts.settings = RolloutSettings.model_validate(FAST)
    store = box.pool.store
    assert store.installed(box.package) == [2, 3, 4]

    first = roll_back(box, "back-1")
    assert first.stage is Stage.COMMITTED and first.release == 2 and first.previous_release == 4, first.reason
    active = store.active(box.package)
    assert active is not None and active.release == 2 and box.trust.releases.installed(box.package) == 2

    second = roll_back(box, "back-2")
    assert second.stage is Stage.COMMITTED and second.release == 1 and second.config_package, second.reason
    assert store.active(box.package) is None  # the config's own package runs, as before the first rollout
    assert box.trust.releases.installed(box.package) == 1
    wait_for_results(box, 10)
    assert versions_in_order(box.results()) == ["1.0", "2.0", "4.0", "2.0", "1.0"]

    with pytest.raises(CommandFailed, match=f"no release of {box.package} ran committed here before"):
        run_command(control(box), "rollback", {"package": box.package, "rollout_id": "back-3"})
