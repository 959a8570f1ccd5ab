"""What a box trusts: its keys, whether packages must be signed, and the releases it has loaded.

The highest release loaded of each package is kept in `<state_dir>/releases.json`, so a rollback is
refused across restarts too. That file fails closed: one that cannot be read refuses signed loads
rather than forgetting the releases, since forgetting them is what a rollback needs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from edge_runtime.config.trust import InlineKey, TrustSettings
from edge_runtime.durable import replace_file
from edge_runtime.errors import EdgeRuntimeError, PackageRefused
from edge_runtime.package.manifest import MANIFEST_NAME
from edge_runtime.package.signing import SIGNATURE_NAME, SignedRelease, TrustedKey, read_public_key, verify_package

__all__ = ["RELEASES_NAME", "ReleaseStore", "TrustPolicy", "trusted_keys"]

RELEASES_NAME = "releases.json"
_VERSION = 1


class ReleaseStore:
    """`<state_dir>/releases.json`: `{"version": 1, "releases": {package name: highest release loaded}}`."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / RELEASES_NAME

    def installed(self, name: str) -> int | None:
        return self._read().get(name)

    def record(self, name: str, release: int) -> None:
        """Remember `release` unless a higher one is recorded: a permitted downgrade does not lower the bar."""
        releases = self._read()
        if releases.get(name, -1) >= release:
            return
        self._write(releases | {name: release})

    def lower_to(self, name: str, release: int) -> None:
        """Lower the bar to `release`: only for a downgrade an operator signed and the box then committed."""
        self._write(self._read() | {name: release})

    def _write(self, releases: dict[str, int]) -> None:
        text = json.dumps({"version": _VERSION, "releases": releases}, indent=2, sort_keys=True)
        try:
            replace_file(self.path, text + "\n")
        except OSError as error:
            raise EdgeRuntimeError(f"cannot record the installed releases in {self.path}: {error}") from None

    def _read(self) -> dict[str, int]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            raise EdgeRuntimeError(f"cannot read the installed releases {self.path}: {error}") from None
        releases = data.get("releases") if isinstance(data, dict) and data.get("version") == _VERSION else None
        if not isinstance(releases, dict) or not all(isinstance(v, int) for v in releases.values()):
            raise EdgeRuntimeError(f"{self.path} does not hold installed releases; move it aside to start afresh")
        return {str(name): int(release) for name, release in releases.items()}


@dataclass(frozen=True)
class TrustPolicy:
    """Checks a package before it loads, when `require_signed`; `allow_downgrade` maps a package name to
    the one lower release the operator accepts."""

    keys: tuple[TrustedKey, ...]
    require_signed: bool
    releases: ReleaseStore
    allow_downgrade: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        keys: Sequence[TrustedKey],
        require_signed: bool | None,
        state_dir: Path,
        allow_downgrade: Mapping[str, int] | None = None,
    ) -> TrustPolicy:
        """`require_signed` None means: required as soon as any key is trusted."""
        required = bool(keys) if require_signed is None else require_signed
        return cls(tuple(keys), required, ReleaseStore(state_dir), dict(allow_downgrade or {}))

    @classmethod
    def from_settings(cls, settings: TrustSettings, state_dir: Path) -> TrustPolicy:
        """The policy of a config's `trust:` section; raises EdgeRuntimeError for a key file it cannot read."""
        keys = trusted_keys(settings.keys, "trust.keys")
        return cls.build(keys, settings.require_signed, state_dir, settings.allow_downgrade)

    def check(self, path: Path, now: datetime | None = None, downgrade_to: int | None = None) -> SignedRelease | None:
        """The verified release of the package at `path` (a directory or its model.yaml); None when
        signatures are not required. `downgrade_to` is a lower release an operator's signed command asked
        for, accepted like one in `allow_downgrade`. Raises PackageRefused."""
        if not self.require_signed:
            return None
        root = path.parent if path.name == MANIFEST_NAME else path
        if not path.exists():
            raise EdgeRuntimeError(f"model not found: {path}")
        if not root.is_dir():
            reason = "unsigned: a bare model file carries no signature; ship it as a signed package"
            raise PackageRefused(str(path), reason, kind="unsigned")
        name = _package_name(root)
        try:
            installed = self.releases.installed(name) if name is not None else None
        except EdgeRuntimeError as error:
            raise PackageRefused(str(root), str(error), kind="unreadable") from None
        allowed = downgrade_to if downgrade_to is not None else self.allow_downgrade.get(name) if name else None
        return verify_package(root, self.keys, now=now, installed_release=installed, allowed_downgrade=allowed)

    def loaded(self, signed: SignedRelease | None) -> None:
        """Record a release once its model is loaded, raising the bar for the next load."""
        if signed is not None:
            self.releases.record(signed.name, signed.release)


def trusted_keys(entries: Sequence[Path | InlineKey], where: str) -> list[TrustedKey]:
    """The keys a config section lists; raises EdgeRuntimeError for a key file it cannot read."""
    return [
        read_public_key(key) if isinstance(key, Path) else TrustedKey.from_pem(key.pem.encode(), where)
        for key in entries
    ]


def _package_name(root: Path) -> str | None:
    """The name the signature claims; verification then checks that `model.yaml` agrees."""
    try:
        document = json.loads((root / SIGNATURE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = document.get("name") if isinstance(document, dict) else None
    return name if isinstance(name, str) else None
