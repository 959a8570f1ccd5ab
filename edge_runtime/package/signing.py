"""Signed model packages: Ed25519 keys, signing a package, and verifying it before a box loads it.

A signature does not hash the model files itself: `model.yaml` already records every file's sha256,
so signing a canonical form of `model.yaml` binds every listed file, and verifying re-checks each of
them. The canonical form is the parsed YAML written as sorted, compact JSON, so re-indenting or
re-quoting `model.yaml` keeps the signature valid while any change of content breaks it.

The signed statement also carries the package's name and version (a signature cannot be moved to
another package), a `release` number that only goes up (a box refuses an older release than one it
has loaded: rollback attack) and an expiry time (a box refuses a stale signature, so an attacker
cannot keep it on an old, signed package forever by withholding updates: freeze attack).

Keys are PEM files, as `openssl pkey` reads them: the private key unencrypted PKCS#8 with mode 0600,
the public key SubjectPublicKeyInfo. A key is named by its key id, the first 16 hex digits of the
sha256 of the raw 32-byte public key. `cryptography` does the Ed25519 arithmetic: it is the
maintained binding of OpenSSL for Python, with wheels for every platform the runtime ships to.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from edge_runtime.errors import EdgeRuntimeError, ManifestError, ModelIntegrityError, PackageRefused
from edge_runtime.package.loader import ModelPackage
from edge_runtime.package.manifest import MANIFEST_NAME, read_manifest

__all__ = [
    "SIGNATURE_FORMAT",
    "SIGNATURE_NAME",
    "SignedRelease",
    "TrustedKey",
    "canonical_json",
    "format_time",
    "generate_keys",
    "key_id_of",
    "load_private_key",
    "manifest_digest",
    "parse_time",
    "read_public_key",
    "sign_package",
    "verify_package",
]

SIGNATURE_NAME = "signature.json"
SIGNATURE_FORMAT = "edge-runtime-package-signature/1"
# Prefixed to the signed bytes so that a signature over a package can never pass for one over anything else.
_DOMAIN = b"edge-runtime package signature\n"
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_SIGNED_FIELDS = ("format", "key_id", "name", "version", "release", "expires", "signed_at", "manifest_sha256")


def key_id_of(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True)
class TrustedKey:
    """A public key a box accepts signatures from; `source` says where it came from, for messages."""

    key_id: str
    public_key: Ed25519PublicKey
    source: str

    @classmethod
    def from_pem(cls, pem: bytes, source: str) -> TrustedKey:
        """Raises ValueError when `pem` is not an Ed25519 public key."""
        try:
            key = serialization.load_pem_public_key(pem)
        except (ValueError, TypeError) as error:
            raise ValueError(f"not a PEM public key ({error})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"not an Ed25519 public key (it is {type(key).__name__})")
        return cls(key_id_of(key), key, source)


def read_public_key(path: Path) -> TrustedKey:
    try:
        pem = path.read_bytes()
    except OSError as error:
        raise EdgeRuntimeError(f"cannot read public key {path}: {error.strerror}") from None
    try:
        return TrustedKey.from_pem(pem, str(path))
    except ValueError as error:
        raise EdgeRuntimeError(f"public key {path}: {error}") from None


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The key in `path`, refused as ssh refuses one when anyone but its owner may read or change the file:
    a key others could read is no longer the owner's alone, and signing with it would hide that."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        pem = path.read_bytes()
    except OSError as error:
        dangling = path.is_symlink() and not path.exists()
        where = f"it is a link to {path.readlink()}, which does not exist" if dangling else error.strerror
        raise EdgeRuntimeError(f"cannot read private key {path}: {where}") from None
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as error:
        raise EdgeRuntimeError(f"{path} is not an unencrypted PEM private key ({error})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise EdgeRuntimeError(f"{path} is not an Ed25519 private key (it is {type(key).__name__})")
    if mode & 0o077:
        raise EdgeRuntimeError(
            f"private key {path} has mode {mode:04o}: group or others may read or change it, so it is not used; "
            f"run `chmod 600 {path}` (and make a new key if others may have read it)"
        )
    return key


def generate_keys(name: str, directory: Path) -> tuple[Path, Path]:
    """Write `NAME.key` (private, mode 0600) and `NAME.pub` into `directory`; never overwrites a key."""
    if not name or "/" in name or name.startswith("."):
        raise EdgeRuntimeError(f"key name {name!r} must be a plain file name, e.g. ops-2026")
    directory.mkdir(parents=True, exist_ok=True)
    private_path, public_path = directory / f"{name}.key", directory / f"{name}.pub"
    for path in (private_path, public_path):
        if path.exists():
            raise EdgeRuntimeError(f"{path} exists; a key is never overwritten, pick another name")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    # Created with mode 0600 from the start: a chmod after writing would leave a moment where others can read it.
    descriptor = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(private_pem)
    public_path.write_bytes(public_pem)
    return private_path, public_path


def canonical_json(data: Any) -> bytes:
    """The one byte form of a JSON value that is signed: sorted keys, no spaces, UTF-8."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def manifest_digest(manifest_path: Path) -> str:
    """The sha256 of `model.yaml`'s canonical form: parsed, then written as sorted compact JSON."""
    try:
        data = yaml.safe_load(manifest_path.read_text(encoding="utf-8"))
        return hashlib.sha256(canonical_json(data)).hexdigest()
    except OSError as error:
        raise ManifestError(str(manifest_path), [f"cannot read: {error.strerror}"]) from None
    except (yaml.YAMLError, TypeError, ValueError) as error:
        raise ManifestError(str(manifest_path), [f"has no canonical form to sign: {error}"]) from None


def format_time(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime(_TIME_FORMAT)


def parse_time(text: object, field: str) -> datetime:
    if not isinstance(text, str):
        raise ValueError(f"{field} must be a time like 2027-01-31T12:00:00Z")
    try:
        return datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        raise ValueError(f"{field} {text!r} is not a time like 2027-01-31T12:00:00Z") from None


def sign_package(
    root: Path, private_key_path: Path, release: int, expires: datetime, *, now: datetime | None = None
) -> Path:
    """Check the package's files against `model.yaml`, then write `signature.json` into `root`; returns its path."""
    if release < 0:
        raise EdgeRuntimeError(f"release must be 0 or more, got {release}")
    signed_at = now or datetime.now(timezone.utc)
    if expires.tzinfo is None:
        raise EdgeRuntimeError("the expiry time needs a time zone")
    if expires <= signed_at:
        raise EdgeRuntimeError(f"the expiry time {format_time(expires)} is not after the signing time")
    key = load_private_key(private_key_path)
    manifest = read_manifest(root / MANIFEST_NAME)
    ModelPackage(root=root, manifest=manifest).verify_files()
    statement: dict[str, Any] = {
        "format": SIGNATURE_FORMAT,
        "key_id": key_id_of(key.public_key()),
        "name": manifest.name,
        "version": manifest.version,
        "release": release,
        "expires": format_time(expires),
        "signed_at": format_time(signed_at),
        "manifest_sha256": manifest_digest(root / MANIFEST_NAME),
    }
    signature = key.sign(_DOMAIN + canonical_json(statement))
    document = statement | {"signature": base64.b64encode(signature).decode("ascii")}
    path = root / SIGNATURE_NAME
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return path


@dataclass(frozen=True)
class SignedRelease:
    """What a verified signature vouches for. `unlisted` are files in the package that neither `model.yaml`
    nor the signature covers (edge-convert's reports, say): the runtime never loads them."""

    name: str
    version: str
    release: int
    expires: datetime
    signed_at: datetime
    key_id: str
    manifest_sha256: str
    unlisted: tuple[str, ...] = ()


def _read_signature(root: Path) -> tuple[dict[str, Any], bytes]:
    path = root / SIGNATURE_NAME
    where = str(root)
    if not path.is_file():
        raise PackageRefused(where, f"unsigned: it has no {SIGNATURE_NAME}", kind="unsigned")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise PackageRefused(where, f"{SIGNATURE_NAME} is unreadable: {error}", kind="unreadable") from None
    if not isinstance(document, dict) or set(document) != {*_SIGNED_FIELDS, "signature"}:
        raise PackageRefused(where, f"{SIGNATURE_NAME} does not hold the fields of a signature", kind="unreadable")
    if document["format"] != SIGNATURE_FORMAT:
        reason = f"{SIGNATURE_NAME} has format {document['format']!r}; this runtime reads {SIGNATURE_FORMAT}"
        raise PackageRefused(where, reason, kind="unreadable")
    try:
        signature = base64.b64decode(str(document["signature"]), validate=True)
    except (binascii.Error, ValueError):
        raise PackageRefused(where, f"{SIGNATURE_NAME}: the signature is not base64", kind="unreadable") from None
    return document, signature


def verify_package(
    root: Path,
    trusted: Sequence[TrustedKey],
    *,
    now: datetime | None = None,
    installed_release: int | None = None,
    allowed_downgrade: int | None = None,
) -> SignedRelease:
    """The release `root` holds, after every check passed; PackageRefused names the first that failed.

    The checks run cheapest first and each relies only on what the ones before established: the key is
    trusted, the signature verifies, it covers this package and this `model.yaml`, it has not expired, the
    release is not older than `installed_release` (unless it is exactly `allowed_downgrade`), and last,
    every file listed in `model.yaml` still has its sha256.
    """
    where = str(root)
    document, signature = _read_signature(root)
    keys = {key.key_id: key for key in trusted}
    key = keys.get(str(document["key_id"]))
    if key is None:
        known = ", ".join(keys) or "no key"
        reason = f"signed by unknown key {document['key_id']}; this box trusts {known}"
        raise PackageRefused(where, reason, kind="unknown_key")
    statement = {field: document[field] for field in _SIGNED_FIELDS}
    try:
        key.public_key.verify(signature, _DOMAIN + canonical_json(statement))
    except (InvalidSignature, TypeError, ValueError):
        reason = f"bad signature: {SIGNATURE_NAME} does not verify with key {key.key_id} ({key.source})"
        raise PackageRefused(where, reason, kind="bad_signature") from None
    signed = _signed_release(where, statement)
    try:
        manifest = read_manifest(root / MANIFEST_NAME)
        digest = manifest_digest(root / MANIFEST_NAME)
    except ManifestError as error:
        raise PackageRefused(where, str(error), kind="unreadable") from None
    if (manifest.name, manifest.version) != (signed.name, signed.version):
        reason = (
            f"the signature is for {signed.name} version {signed.version}, "
            f"but model.yaml is {manifest.name} version {manifest.version}"
        )
        raise PackageRefused(where, reason, kind="other_package")
    if digest != signed.manifest_sha256:
        reason = f"{MANIFEST_NAME} changed after it was signed (sha256 {digest}, signed {signed.manifest_sha256})"
        raise PackageRefused(where, reason, kind="manifest_changed")
    moment = now or datetime.now(timezone.utc)
    if moment >= signed.expires:
        reason = (
            f"the signature expired at {format_time(signed.expires)} (now {format_time(moment)}); stale signatures "
            "are refused so that a box cannot be held on old models (freeze attack): sign the package again"
        )
        raise PackageRefused(where, reason, kind="expired")
    if installed_release is not None and signed.release < installed_release and signed.release != allowed_downgrade:
        reason = (
            f"release {signed.release} is lower than release {installed_release} already loaded on this box "
            f"(rollback attack); to go back on purpose set trust.allow_downgrade: {{{signed.name}: {signed.release}}}"
        )
        raise PackageRefused(where, reason, kind="rollback")
    package = ModelPackage(root=root, manifest=manifest)
    try:
        package.verify_files()
    except ModelIntegrityError as error:
        raise PackageRefused(where, f"a file differs from what was signed: {error}", kind="file_changed") from None
    return _with_unlisted(signed, package)


def _signed_release(where: str, statement: dict[str, Any]) -> SignedRelease:
    try:
        release = statement["release"]
        if not isinstance(release, int) or isinstance(release, bool) or release < 0:
            raise ValueError("release must be a whole number, 0 or more")
        for field in ("key_id", "name", "version", "manifest_sha256"):
            if not isinstance(statement[field], str):
                raise ValueError(f"{field} must be text")
        return SignedRelease(
            name=statement["name"],
            version=statement["version"],
            release=release,
            expires=parse_time(statement["expires"], "expires"),
            signed_at=parse_time(statement["signed_at"], "signed_at"),
            key_id=statement["key_id"],
            manifest_sha256=statement["manifest_sha256"],
        )
    except ValueError as error:
        raise PackageRefused(where, f"{SIGNATURE_NAME} is malformed: {error}", kind="unreadable") from None


def _with_unlisted(signed: SignedRelease, package: ModelPackage) -> SignedRelease:
    listed = {MANIFEST_NAME, SIGNATURE_NAME}
    listed |= {entry.path for variant in package.manifest.variants.values() for entry in variant.files}
    present = {path.relative_to(package.root).as_posix() for path in package.root.rglob("*") if not path.is_dir()}
    unlisted = tuple(sorted(present - {Path(p).as_posix() for p in listed}))
    return replace(signed, unlisted=unlisted)
