from __future__ import annotations

import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from edge_runtime.package.signing import generate_keys, sign_package

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def now() -> datetime:
    """The time the packages here are signed and checked at, unless a test moves it."""
    return NOW


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    """(private, public) key files of a fresh Ed25519 pair."""
    return generate_keys("ops", tmp_path / "keys")


@pytest.fixture
def package(face_package_dir: Path, tmp_path: Path) -> Path:
    """A writable copy of the face detection package, unsigned."""
    return Path(shutil.copytree(face_package_dir, tmp_path / "face"))


@pytest.fixture
def signed_package(package: Path, keys: tuple[Path, Path]) -> Path:
    """The package signed as release 5, valid for 30 days from NOW."""
    sign_package(package, keys[0], release=5, expires=NOW + timedelta(days=30), now=NOW)
    return package
