"""`edge-runtime package sign|verify|pack`: sign a model package, check it as a box would, ship it as one file.

`verify` runs the same checks a box runs before loading, so a release can be tried before it is sent;
it exits with status 2 and the reason when the package would be refused.
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from edge_runtime.errors import EdgeRuntimeError, PackageRefused
from edge_runtime.package.archive import pack, unpack
from edge_runtime.package.manifest import MANIFEST_NAME
from edge_runtime.package.signing import (
    SignedRelease,
    format_time,
    read_public_key,
    sign_package,
    verify_package,
)

__all__ = ["describe", "run_package"]


def run_package(args: argparse.Namespace) -> int:
    if args.package_command == "sign":
        expires = datetime.now(timezone.utc) + args.expires_in
        path = sign_package(args.package, args.key, args.release, expires)
        print(f"signed {args.package} as release {args.release}, valid until {format_time(expires)}: {path}")
        return 0
    if args.package_command == "pack":
        print(pack(args.package, args.output))
        return 0
    trusted = [read_public_key(path) for path in args.trust]
    if args.package.is_file():
        with tempfile.TemporaryDirectory(prefix="edge-runtime-verify-") as staging:
            root = _package_root(unpack(args.package, Path(staging)))
            try:
                signed = verify_package(root, trusted, installed_release=args.installed_release)
            except PackageRefused as error:  # named by the archive, not by the temporary folder it was checked in
                raise PackageRefused(str(args.package), error.reason, kind=error.kind) from None
    else:
        signed = verify_package(args.package, trusted, installed_release=args.installed_release)
    print(describe(args.package, signed))
    return 0


def _package_root(unpacked: Path) -> Path:
    """The package inside an unpacked archive: at its top, or in its one folder (`tar -cf x.tar face/`)."""
    if (unpacked / MANIFEST_NAME).is_file():
        return unpacked
    entries = list(unpacked.iterdir())
    if len(entries) == 1 and (entries[0] / MANIFEST_NAME).is_file():
        return entries[0]
    raise EdgeRuntimeError(f"the archive holds no {MANIFEST_NAME} at its top or in its one folder")


def describe(package: Path, signed: SignedRelease) -> str:
    lines = [
        f"{package}: ok: {signed.name} version {signed.version} release {signed.release}, "
        f"signed by key {signed.key_id} on {format_time(signed.signed_at)}, valid until {format_time(signed.expires)}"
    ]
    if signed.unlisted:
        lines.append(f"  not covered by the signature, never loaded: {', '.join(signed.unlisted)}")
    return "\n".join(lines)
