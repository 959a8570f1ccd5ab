"""The model store: releases installed side by side, one active per package, the rest kept for rollbacks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.store import ModelStore


def staged(store: ModelStore, rollout_id: str, package_dir: Path) -> Path:
    target = store.staging(rollout_id)
    shutil.copytree(package_dir, target, dirs_exist_ok=True)
    return target


def test_install_activate_and_go_back_to_the_configs_package(tmp_path: Path, face_package_dir: Path) -> None:
    store = ModelStore(tmp_path)
    assert store.active("faces") is None
    installed = store.install("faces", 3, staged(store, "r-3", face_package_dir))
    assert (installed.path / "model.yaml").is_file() and not (tmp_path / "models/.staging/r-3").exists()
    store.activate("faces", 3)
    active = store.active("faces")
    assert active is not None and active.release == 3 and active.path == installed.path
    store.activate("faces", None)
    assert store.active("faces") is None and installed.path.is_dir()  # still installed, for a rollback


def test_only_installed_releases_can_be_made_active(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    with pytest.raises(EdgeRuntimeError, match="release 9 is not installed"):
        store.activate("faces", 9)


def test_prune_keeps_the_active_release_and_the_newest_others(tmp_path: Path, face_package_dir: Path) -> None:
    store = ModelStore(tmp_path, keep=2)
    for release in (1, 2, 3, 4, 5):
        store.install("faces", release, staged(store, f"r-{release}", face_package_dir))
    store.activate("faces", 2)
    assert store.prune("faces") == [1, 3]
    assert store.installed("faces") == [2, 4, 5]


def test_a_half_unpacked_staging_area_is_cleared_at_start(tmp_path: Path, face_package_dir: Path) -> None:
    store = ModelStore(tmp_path)
    staged(store, "cut-short", face_package_dir)
    store.clear_staging()
    assert not (tmp_path / "models/.staging").exists()


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".staging"])
def test_package_names_cannot_reach_outside_the_store(tmp_path: Path, name: str) -> None:
    with pytest.raises(EdgeRuntimeError, match="is no package name"):
        ModelStore(tmp_path).active(name)


def test_resolve_gives_the_active_release_of_a_configured_package(tmp_path: Path, face_package_dir: Path) -> None:
    store = ModelStore(tmp_path)
    assert store.resolve(face_package_dir) == face_package_dir  # nothing active: the config's own package
    installed = store.install("face_detection_short_range", 7, staged(store, "r-7", face_package_dir))
    store.activate("face_detection_short_range", 7)
    assert store.resolve(face_package_dir) == installed.path
    assert store.resolve(installed.path) == installed.path  # a release named on purpose stays itself
    assert store.resolve(tmp_path / "model.onnx") == tmp_path / "model.onnx"  # a bare file: nothing to resolve


def test_prune_keeps_what_a_rollback_goes_to(tmp_path: Path, face_package_dir: Path) -> None:
    store = ModelStore(tmp_path, keep=1)
    for release in (2, 5, 6, 7):
        store.install("faces", release, staged(store, f"r-{release}", face_package_dir))
    store.activate("faces", 7)
    assert store.prune("faces", keep_also={2}) == [5]
    assert store.installed("faces") == [2, 6, 7]
