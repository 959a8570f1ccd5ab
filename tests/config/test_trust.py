"""The `trust:` section: keys relative to the config file, problems with their field paths."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.config import ConfigFileError, load_config
from edge_runtime.config.trust import InlineKey
from edge_runtime.package.signing import generate_keys, sign_package


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ConfigFileError) as caught:
        load_config(path, environ={})
    return caught.value.problems


def test_key_files_are_relative_to_the_config_and_make_signatures_required(
    base_config: dict[str, Any], write_config: Any, tmp_path: Path
) -> None:
    generate_keys("ops", tmp_path / "etc" / "keys")
    base_config["trust"] = {"keys": ["keys/ops.pub"], "allow_downgrade": {"face_detection_short_range": 3}}
    base_config["pipelines"][0]["enabled"] = False  # its model is unsigned
    config = load_config(write_config(base_config), environ={})
    assert config.trust.keys == (tmp_path / "etc" / "keys" / "ops.pub",)
    assert config.trust.signatures_required
    assert config.trust.allow_downgrade == {"face_detection_short_range": 3}


def test_without_keys_nothing_is_required_and_an_explicit_false_wins(
    base_config: dict[str, Any], write_config: Any, tmp_path: Path
) -> None:
    assert not load_config(write_config(base_config), environ={}).trust.signatures_required
    generate_keys("ops", tmp_path / "etc")
    base_config["trust"] = {"keys": ["ops.pub"], "require_signed": False}
    assert not load_config(write_config(base_config), environ={}).trust.signatures_required


def test_a_missing_or_unusable_key_file_is_reported_at_its_field(
    base_config: dict[str, Any], write_config: Any, tmp_path: Path
) -> None:
    private, _ = generate_keys("ops", tmp_path / "etc")
    base_config["trust"] = {"keys": ["missing.pub", private.name]}
    path = write_config(base_config)
    missing, not_public = problems_of(path)
    absent = tmp_path / "etc" / "missing.pub"
    assert missing == f"{path}:13: trust.keys[0]: cannot read public key {absent}: No such file or directory"
    assert not_public.startswith(f"{path}:14: trust.keys[1]: public key {private}: not a PEM public key (")


def test_require_signed_without_keys_is_a_problem(base_config: dict[str, Any], write_config: Any) -> None:
    base_config["trust"] = {"require_signed": True}
    path = write_config(base_config)
    assert problems_of(path) == [
        f"{path}:11: trust: require_signed needs at least one key in trust.keys, or every model would be refused"
    ]


def test_a_negative_release_and_a_bad_inline_key_are_problems(base_config: dict[str, Any], write_config: Any) -> None:
    base_config["trust"] = {"allow_downgrade": {"faces": -1}}
    path = write_config(base_config)
    assert problems_of(path) == [f"{path}:12: trust.allow_downgrade: faces: a release is 0 or more, got -1"]
    base_config["trust"] = {"keys": [{"pem": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"}]}
    problems = problems_of(write_config(base_config))
    assert len(problems) == 1 and ": trust.keys[0].pem: not a PEM public key (" in problems[0], problems


def test_an_inline_key_is_accepted(tmp_path: Path) -> None:
    _, public = generate_keys("ops", tmp_path)
    assert InlineKey(pem=public.read_text()).pem.startswith("-----BEGIN PUBLIC KEY-----")


def test_check_config_refuses_what_run_would_refuse(
    base_config: dict[str, Any], write_config: Any, face_package_dir: Path, tmp_path: Path
) -> None:
    package = Path(shutil.copytree(face_package_dir, tmp_path / "etc" / "face"))
    private, _ = generate_keys("ops", tmp_path / "etc")
    base_config["trust"] = {"keys": ["ops.pub"]}
    base_config["state_dir"] = str(tmp_path / "state")
    base_config["pipelines"][0]["model"]["path"] = "face"
    path = write_config(base_config)
    assert problems_of(path) == [
        f"{path}:10: pipelines[0].model.path: pipeline 'faces': package {package} refused: "
        "unsigned: it has no signature.json"
    ]
    sign_package(package, private, release=1, expires=datetime.now(timezone.utc) + timedelta(days=1))
    assert load_config(path, environ={}).trust.signatures_required
