"""The box's side: installed releases kept across restarts, and the policy every model load goes through."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from edge_runtime.errors import EdgeRuntimeError, PackageRefused
from edge_runtime.package.signing import read_public_key, sign_package
from edge_runtime.package.trust import ReleaseStore, TrustPolicy


def test_the_highest_release_loaded_is_kept(tmp_path: Path) -> None:
    store = ReleaseStore(tmp_path / "state")
    assert store.installed("faces") is None
    store.record("faces", 4)
    store.record("faces", 2)  # a permitted downgrade does not lower the bar
    assert ReleaseStore(tmp_path / "state").installed("faces") == 4


def test_an_unreadable_release_file_refuses_rather_than_forgets(tmp_path: Path) -> None:
    (tmp_path / "releases.json").write_text("{not json")
    with pytest.raises(EdgeRuntimeError, match=r"cannot read the installed releases .*releases.json"):
        ReleaseStore(tmp_path).installed("faces")


def test_without_keys_nothing_is_checked(package: Path, tmp_path: Path) -> None:
    policy = TrustPolicy.build([], None, tmp_path / "state")
    assert not policy.require_signed
    assert policy.check(package) is None


def test_a_bare_model_file_cannot_be_signed_so_it_is_refused(
    package: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    policy = TrustPolicy.build([read_public_key(keys[1])], None, tmp_path / "state")
    bare = package / "tflite" / "fp32" / "model.tflite"
    with pytest.raises(PackageRefused, match="unsigned: a bare model file carries no signature") as caught:
        policy.check(bare)
    assert caught.value.kind == "unsigned"


def test_a_loaded_release_refuses_older_ones_until_the_operator_allows_that_one(
    package: Path, keys: tuple[Path, Path], tmp_path: Path, now: datetime
) -> None:
    trusted = [read_public_key(keys[1])]
    policy = TrustPolicy.build(trusted, None, tmp_path / "state")
    sign_package(package, keys[0], release=7, expires=now + timedelta(days=1), now=now)
    policy.loaded(policy.check(package / "model.yaml", now=now))
    sign_package(package, keys[0], release=6, expires=now + timedelta(days=1), now=now)
    with pytest.raises(PackageRefused, match="release 6 is lower than release 7 already loaded") as caught:
        policy.check(package, now=now)
    assert caught.value.kind == "rollback"
    allowing = TrustPolicy.build(trusted, None, tmp_path / "state", {"face_detection_short_range": 6})
    release = allowing.check(package, now=now)
    assert release is not None and release.release == 6
    allowing.loaded(release)
    assert allowing.releases.installed("face_detection_short_range") == 7


def test_a_missing_package_is_reported_as_missing(keys: tuple[Path, Path], tmp_path: Path) -> None:
    policy = TrustPolicy.build([read_public_key(keys[1])], None, tmp_path / "state")
    with pytest.raises(EdgeRuntimeError, match=r"^model not found: .*nowhere$"):
        policy.check(tmp_path / "nowhere")
