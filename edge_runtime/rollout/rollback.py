"""Where a rollback goes: the release that ran committed before the active one, the config's package included.

The journal keeps what ran and was committed (`Journal.history`): releases that were rolled back never
ran committed and are never a target, whatever is still installed. When the release before is the
config's own package, a rollback returns to it: the package the config names is verified as any
release is, copied into the store under its release number so that it can be shadowed beside the
running one (a path outside the store would load the active release instead), and the commit removes
the active pointer, so the config's package runs again as it did before the first rollout.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.signing import TrustedKey, verify_package
from edge_runtime.package.store import Installed, ModelStore
from edge_runtime.rollout.state import Journal

if TYPE_CHECKING:
    from edge_runtime.rollout.manager import RolloutHost

__all__ = ["before_active", "config_package_path", "install_config_package", "rollback_target"]


def rollback_target(
    journal: Journal, store: ModelStore, host: RolloutHost, trusted: Sequence[TrustedKey], package: str
) -> tuple[int, bool]:
    """The release a rollback goes to when none is named, and whether it is the config's own package (then
    installed in the store from the path the config names, once verified)."""
    before = before_active(journal, package)
    if before is not None:
        return before, False
    return install_config_package(store, trusted, package, config_package_path(host, package)).release, True


def before_active(journal: Journal, package: str) -> int | None:
    """The release that ran committed before the one active now (None: the config's own package)."""
    ran = journal.history(package)
    if len(ran) < 2:
        raise EdgeRuntimeError(f"no release of {package} ran committed here before the one running")
    return ran[-2]


def config_package_path(host: RolloutHost, package: str) -> Path:
    """The path the config names for `package`, from the pipelines and served models now running it."""
    for name, pipeline in host.pipelines().items():
        if pipeline.model.package.name == package:
            return _absolute(host.pipeline_config(name).model.path, host.config_file)
    serving = host.serving()
    if serving is not None:
        for config in serving.settings.models:
            served = serving.models.get(config.name)
            if served is not None and served.model.package.name == package:
                return _absolute(config.path, serving.config_file)
    raise EdgeRuntimeError(f"nothing on this box runs package {package}, so its config's package is unknown")


def _absolute(path: Path, config_file: Path) -> Path:
    return path if path.is_absolute() else config_file.parent / path


def install_config_package(store: ModelStore, trusted: Sequence[TrustedKey], package: str, path: Path) -> Installed:
    """The config's package at `path`, verified, installed in the store under its own release number."""
    signed = verify_package(path, trusted)
    if signed.name != package:
        raise EdgeRuntimeError(f"the config's package at {path} is {signed.name}, not {package}")
    installed = store.path(package, signed.release)
    if installed.is_dir():
        return Installed(package, signed.release, installed)
    staging = store.staging(f"config-{package}-{signed.release}")
    try:
        shutil.copytree(path, staging / "package", symlinks=False)
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise EdgeRuntimeError(f"cannot copy the config's package {path} into {store.root}: {error}") from None
    done = store.install(package, signed.release, staging / "package")
    shutil.rmtree(staging, ignore_errors=True)
    return done
