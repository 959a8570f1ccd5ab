"""What a SIGHUP reload must start, stop and restart."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.config import DaemonConfig, diff_pipelines


@pytest.fixture
def config_data(face_package_dir: Path) -> dict[str, Any]:
    def pipeline(name: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "source": {"type": "v4l2", "device": 0}, "model": {"path": str(face_package_dir)}} | extra

    return {"device_id": "box-1", "pipelines": [pipeline("a"), pipeline("b"), pipeline("c", enabled=False)]}


def changed(data: dict[str, Any], **updates: Any) -> DaemonConfig:
    new = copy.deepcopy(data) | updates
    return DaemonConfig.model_validate(new)


def test_same_config_changes_nothing(config_data: dict[str, Any]) -> None:
    diff = diff_pipelines(DaemonConfig.model_validate(config_data), changed(config_data))
    assert diff.unchanged == ("a", "b") and diff.empty
    assert not (diff.added or diff.removed or diff.changed or diff.restart_all)


def test_pipelines_added_removed_and_changed(config_data: dict[str, Any]) -> None:
    old = DaemonConfig.model_validate(config_data)
    pipelines = copy.deepcopy(config_data["pipelines"])
    pipelines[0]["publish"] = {"min_score": 0.8}  # a: changed
    del pipelines[1]  # b: removed
    pipelines[1]["enabled"] = True  # c: was disabled, so added
    pipelines.append(pipelines[0] | {"name": "d"})  # d: added
    diff = diff_pipelines(old, changed(config_data, pipelines=pipelines))
    assert (diff.added, diff.removed, diff.changed, diff.unchanged) == (("c", "d"), ("b",), ("a",), ())
    assert not diff.restart_all and diff.settings_changed == ()


def test_disabling_a_pipeline_removes_it(config_data: dict[str, Any]) -> None:
    pipelines = copy.deepcopy(config_data["pipelines"])
    pipelines[1]["enabled"] = False
    diff = diff_pipelines(DaemonConfig.model_validate(config_data), changed(config_data, pipelines=pipelines))
    assert (diff.removed, diff.unchanged) == (("b",), ("a",))


@pytest.mark.parametrize(
    "update",
    [{"device_id": "box-2"}, {"mqtt": {"host": "broker.example"}}, {"state_dir": "/srv/state"}],
    ids=["device_id", "mqtt", "state_dir"],
)
def test_shared_settings_restart_everything(config_data: dict[str, Any], update: dict[str, Any]) -> None:
    diff = diff_pipelines(DaemonConfig.model_validate(config_data), changed(config_data, **update))
    assert diff.restart_all and diff.changed == ("a", "b") and diff.unchanged == ()
    assert diff.settings_changed == tuple(update)


def test_other_settings_leave_pipelines_running(config_data: dict[str, Any]) -> None:
    new = changed(config_data, log_level="debug", stats={"interval_s": 5})
    diff = diff_pipelines(DaemonConfig.model_validate(config_data), new)
    assert diff.settings_changed == ("stats", "log_level")
    assert not diff.restart_all and diff.unchanged == ("a", "b") and not diff.empty


def test_a_new_password_restarts_everything(config_data: dict[str, Any]) -> None:
    old = changed(config_data, mqtt={"username": "u", "password": "one"})
    diff = diff_pipelines(old, changed(config_data, mqtt={"username": "u", "password": "two"}))
    assert diff.restart_all and diff.settings_changed == ("mqtt",)
