"""Releases of packages installed on the box by rollouts, and which one of each package is active.

    <state_dir>/models/<package>/releases/<release>/   an unpacked, verified package
    <state_dir>/models/<package>/active.json            {"release": 7}
    <state_dir>/models/.staging/<rollout_id>/           an archive being unpacked and checked

The config names a package by path; where a rollout has made another release of that package active,
pipelines and served models load that one instead (`resolve`). No `active.json` means the config's
own package runs. The pointer is one small file replaced durably, so the switch on disk is a single
atomic step, and the previous releases stay installed (`keep` of them) so that a rollback needs no
download.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from edge_runtime.durable import replace_file, sync_directory
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.manifest import MANIFEST_NAME, read_manifest

__all__ = ["Installed", "ModelStore"]

log = logging.getLogger(__name__)

POINTER = "active.json"


@dataclass(frozen=True)
class Installed:
    package: str
    release: int
    path: Path


class ModelStore:
    def __init__(self, state_dir: Path, keep: int = 2) -> None:
        self.root = state_dir / "models"
        self.keep = keep  # releases kept besides the active one

    def staging(self, rollout_id: str) -> Path:
        """An empty directory for a rollout's archive to be unpacked and checked in."""
        path = self.root / ".staging" / rollout_id
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def install(self, package: str, release: int, staged: Path) -> Installed:
        """Move a checked package from staging to its release directory; an installed copy of the release is kept."""
        target = self._releases(package) / str(release)
        if target.exists():
            log.info("model store: %s release %d is installed already", package, release)
            shutil.rmtree(staged, ignore_errors=True)
            return Installed(package, release, target)
        target.parent.mkdir(parents=True, exist_ok=True)
        staged.rename(target)
        sync_directory(target.parent)
        return Installed(package, release, target)

    def resolve(self, path: Path) -> Path:
        """The package at `path`, or the release of it made active here; a path inside the store names a
        release on purpose (a rollout trying it) and is taken as it is."""
        manifest = path / MANIFEST_NAME
        if not manifest.is_file() or path.resolve().is_relative_to(self.root.resolve()):
            return path  # a bare model file or nothing (loading says what is wrong), or a release itself
        try:
            active = self.active(read_manifest(manifest).name)
        except EdgeRuntimeError:
            return path  # a manifest that does not read: loading the package says why
        return path if active is None else active.path

    def path(self, package: str, release: int) -> Path:
        return self._releases(package) / str(release)

    def active(self, package: str) -> Installed | None:
        pointer = self._directory(package) / POINTER
        try:
            release = int(json.loads(pointer.read_text(encoding="utf-8"))["release"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise EdgeRuntimeError(f"model store: {pointer} is unreadable ({error})") from None
        path = self._releases(package) / str(release)
        if not path.is_dir():
            raise EdgeRuntimeError(f"model store: {pointer} names release {release}, which is not installed")
        return Installed(package, release, path)

    def activate(self, package: str, release: int | None) -> None:
        """Make `release` the one that runs; None goes back to the package the config names."""
        pointer = self._directory(package) / POINTER
        if release is None:
            pointer.unlink(missing_ok=True)
            sync_directory(pointer.parent)
            return
        if not (self._releases(package) / str(release)).is_dir():
            raise EdgeRuntimeError(f"model store: {package} release {release} is not installed")
        replace_file(pointer, json.dumps({"release": release}) + "\n")

    def installed(self, package: str) -> list[int]:
        releases = self._releases(package)
        return sorted(int(p.name) for p in releases.iterdir() if p.name.isdigit()) if releases.is_dir() else []

    def prune(self, package: str, keep_also: Collection[int] = ()) -> list[int]:
        """Remove all but the active release, `keep_also` (what a rollback goes to) and the `keep` highest
        others; returns what was removed."""
        current = self.active(package)
        others = [
            r for r in self.installed(package) if (current is None or r != current.release) and r not in keep_also
        ]
        removed = others[: max(0, len(others) - self.keep)]
        for release in removed:
            shutil.rmtree(self._releases(package) / str(release), ignore_errors=True)
        return removed

    def clear_staging(self) -> None:
        """What a stop left half unpacked is never used: remove it at start."""
        shutil.rmtree(self.root / ".staging", ignore_errors=True)

    def _directory(self, package: str) -> Path:
        if not package or "/" in package or package.startswith("."):
            raise EdgeRuntimeError(f"model store: {package!r} is no package name")
        return self.root / package

    def _releases(self, package: str) -> Path:
        return self._directory(package) / "releases"
