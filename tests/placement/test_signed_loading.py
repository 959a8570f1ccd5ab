"""Every model the daemon loads goes through the model pool, which verifies it first when the box requires it."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from edge_runtime.config import ModelConfig
from edge_runtime.errors import PackageRefused
from edge_runtime.package.signing import generate_keys, read_public_key, sign_package
from edge_runtime.package.trust import TrustPolicy
from edge_runtime.placement.loading import look_at_box
from edge_runtime.placement.model_pool import ModelPool


def test_only_signed_intact_packages_load_when_signatures_are_required(face_package_dir: Path, tmp_path: Path) -> None:
    package = Path(shutil.copytree(face_package_dir, tmp_path / "face"))
    private, public = generate_keys("ops", tmp_path / "keys")
    trust = TrustPolicy.build([read_public_key(public)], None, tmp_path / "state")
    pool = ModelPool(look_at_box(), tmp_path / "state", tmp_path / "cache", trust)
    config = ModelConfig(path=package, backend="litert")

    with pytest.raises(PackageRefused, match=r"unsigned: it has no signature\.json"):
        pool.acquire("door", config, tmp_path / "config.yaml")

    sign_package(package, private, release=3, expires=datetime.now(timezone.utc) + timedelta(days=1))
    model = pool.acquire("door", config, tmp_path / "config.yaml")
    assert model.backend.runs_on.backend == "litert"
    releases = json.loads((tmp_path / "state" / "releases.json").read_text())
    assert releases == {"version": 1, "releases": {"face_detection_short_range": 3}}
    pool.release("door")

    model_file = package / "tflite" / "fp32" / "model.tflite"
    model_file.write_bytes(model_file.read_bytes()[:-16])
    with pytest.raises(PackageRefused, match=r"a file differs from what was signed: .*model.tflite has sha256"):
        pool.acquire("door", config, tmp_path / "config.yaml")
    pool.close()
