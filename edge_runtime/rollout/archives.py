"""What a rollout makes of a package archive before anything runs it: fetched, unpacked and verified.

The archive comes from the network and is hostile until its signature, its files' checksums and its
release number say otherwise. Each limit that ends a fetch is named with the setting that sets it, so
the operator reading a failed rollout knows what to change; archives the unpacker refuses (links,
escaping paths, setuid bits, bombs) are counted, since a box that keeps being sent them is worth a look
even when every one was stopped.
"""

from __future__ import annotations

import threading
from pathlib import Path

from edge_runtime.config.rollout import RolloutSettings
from edge_runtime.errors import ArchiveRefused, EdgeRuntimeError
from edge_runtime.package.archive import unpack
from edge_runtime.package.signing import SignedRelease, verify_package
from edge_runtime.package.trust import TrustPolicy
from edge_runtime.rollout.download import DownloadDeadlineError, DownloadStoppedError, fetch

__all__ = ["Archives", "verify"]


class Archives:
    """Fetches and unpacks rollout archives under the rollout settings, counting the refused ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refused = 0

    @property
    def refused(self) -> int:
        """Archives the unpacker refused since the daemon started."""
        with self._lock:
            return self._refused

    def fetch_and_unpack(
        self, source: str, sha256: str, staging: Path, settings: RolloutSettings, stop: threading.Event
    ) -> Path:
        """The package folder unpacked from `source` into `staging`; EdgeRuntimeError naming why not."""
        try:
            archive = fetch(
                source, staging / "package.tar", sha256=sha256, max_bytes=settings.max_bytes,
                timeout_s=settings.download_timeout_s, attempts=settings.download_attempts, stop=stop,
                deadline_s=settings.download_deadline_s,
            )  # fmt: skip
        except DownloadStoppedError:
            # the part is in this rollout's staging folder, which the rollback removes: nothing resumes it
            raise EdgeRuntimeError("aborted during the download; the bytes fetched are removed") from None
        except DownloadDeadlineError as error:
            raise EdgeRuntimeError(f"{error}; rollout.download_deadline_s sets the deadline") from None
        try:
            return unpack(archive, staging, max_bytes=settings.max_bytes, max_files=settings.max_files)
        except ArchiveRefused:
            with self._lock:
                self._refused += 1
            raise


def verify(unpacked: Path, trust: TrustPolicy | None, package: str, downgrade_to: int | None) -> SignedRelease:
    """The signed release at `unpacked`, if a trusted key signed it as `package` at an acceptable release."""
    if trust is None:
        raise EdgeRuntimeError("this box trusts no signing key (trust.keys), so it takes no rollout")
    signed = verify_package(
        unpacked, trust.keys, installed_release=trust.releases.installed(package), allowed_downgrade=downgrade_to
    )
    if signed.name != package:
        raise EdgeRuntimeError(f"the archive holds package {signed.name}, not {package}")
    return signed
