from __future__ import annotations

import json
import shutil
import stat
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from edge_runtime.errors import EdgeRuntimeError, PackageRefused
from edge_runtime.package.signing import (
    SIGNATURE_NAME,
    TrustedKey,
    generate_keys,
    manifest_digest,
    read_public_key,
    sign_package,
    verify_package,
)

Keys = tuple[Path, Path]


def refusal(root: Path, trusted: list[TrustedKey], now: datetime, **releases: int) -> PackageRefused:
    with pytest.raises(PackageRefused) as caught:
        verify_package(root, trusted, now=now, **releases)
    assert caught.value.path == str(root)
    assert str(caught.value) == f"package {root} refused: {caught.value.reason}"
    return caught.value


def test_a_signed_package_verifies_and_says_what_it_covers(signed_package: Path, keys: Keys, now: datetime) -> None:
    trusted = read_public_key(keys[1])
    release = verify_package(signed_package, [trusted], now=now)
    assert (release.name, release.version, release.release) == ("face_detection_short_range", "0.10.14", 5)
    assert release.key_id == trusted.key_id and len(trusted.key_id) == 16
    assert release.expires == now + timedelta(days=30) and release.signed_at == now
    assert release.unlisted == ()
    document = json.loads((signed_package / SIGNATURE_NAME).read_text())
    assert document["manifest_sha256"] == manifest_digest(signed_package / "model.yaml")


def test_the_private_key_is_readable_by_its_owner_only_and_never_overwritten(tmp_path: Path) -> None:
    private, public = generate_keys("fleet", tmp_path)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    with pytest.raises(EdgeRuntimeError, match="never overwritten"):
        generate_keys("fleet", tmp_path)


def test_unsigned_is_refused(package: Path, keys: Keys, now: datetime) -> None:
    error = refusal(package, [read_public_key(keys[1])], now)
    assert error.kind == "unsigned"
    assert error.reason == "unsigned: it has no signature.json"


def test_a_key_the_box_does_not_trust_is_refused(signed_package: Path, tmp_path: Path, now: datetime) -> None:
    _, other_public = generate_keys("stranger", tmp_path / "other")
    other = read_public_key(other_public)
    error = refusal(signed_package, [other], now)
    assert error.kind == "unknown_key"
    signer = json.loads((signed_package / SIGNATURE_NAME).read_text())["key_id"]
    assert error.reason == f"signed by unknown key {signer}; this box trusts {other.key_id}"


def test_any_of_several_trusted_keys_verifies_for_rotation(signed_package: Path, keys: Keys, now: datetime) -> None:
    _, new_public = generate_keys("ops-next", keys[1].parent)
    trusted = [read_public_key(new_public), read_public_key(keys[1])]
    assert verify_package(signed_package, trusted, now=now).release == 5


def test_an_altered_signature_statement_is_a_bad_signature(signed_package: Path, keys: Keys, now: datetime) -> None:
    path = signed_package / SIGNATURE_NAME
    document = json.loads(path.read_text())
    document["release"] = 99  # e.g. to get past the rollback check
    path.write_text(json.dumps(document))
    trusted = read_public_key(keys[1])
    error = refusal(signed_package, [trusted], now)
    assert error.kind == "bad_signature"
    assert error.reason == f"bad signature: signature.json does not verify with key {trusted.key_id} ({keys[1]})"


def test_a_tampered_model_file_is_refused(signed_package: Path, keys: Keys, now: datetime) -> None:
    model = signed_package / "tflite" / "fp32" / "model.tflite"
    data = bytearray(model.read_bytes())
    data[1000] ^= 0xFF
    model.write_bytes(bytes(data))
    error = refusal(signed_package, [read_public_key(keys[1])], now)
    assert error.kind == "file_changed"
    assert error.reason.startswith("a file differs from what was signed: model face_detection_short_range variant ")
    assert "tflite/fp32/model.tflite has sha256" in error.reason


def test_a_tampered_manifest_is_refused(signed_package: Path, keys: Keys, now: datetime) -> None:
    manifest = signed_package / "model.yaml"
    data = yaml.safe_load(manifest.read_text())
    data["inputs"][0]["mean"] = [0.0]
    manifest.write_text(yaml.safe_dump(data))
    error = refusal(signed_package, [read_public_key(keys[1])], now)
    assert error.kind == "manifest_changed"
    assert error.reason.startswith("model.yaml changed after it was signed (sha256 ")


def test_reformatting_the_manifest_keeps_the_signature_valid(signed_package: Path, keys: Keys, now: datetime) -> None:
    manifest = signed_package / "model.yaml"
    manifest.write_text(yaml.safe_dump(yaml.safe_load(manifest.read_text()), indent=4, default_flow_style=True))
    assert verify_package(signed_package, [read_public_key(keys[1])], now=now).release == 5


def test_a_signature_over_another_package_is_refused(
    signed_package: Path, face_package_dir: Path, keys: Keys, tmp_path: Path, now: datetime
) -> None:
    other = Path(shutil.copytree(face_package_dir, tmp_path / "other"))
    manifest = other / "model.yaml"
    manifest.write_text(manifest.read_text().replace("name: face_detection_short_range", "name: door_camera"))
    shutil.copy(signed_package / SIGNATURE_NAME, other / SIGNATURE_NAME)
    error = refusal(other, [read_public_key(keys[1])], now)
    assert error.kind == "other_package"
    assert error.reason == (
        "the signature is for face_detection_short_range version 0.10.14, but model.yaml is door_camera version 0.10.14"
    )


def test_an_expired_signature_is_refused(signed_package: Path, keys: Keys, now: datetime) -> None:
    error = refusal(signed_package, [read_public_key(keys[1])], now + timedelta(days=31))
    assert error.kind == "expired"
    assert error.reason.startswith("the signature expired at 2026-07-01T12:00:00Z (now 2026-07-02T12:00:00Z)")
    assert "freeze attack" in error.reason


def test_an_older_release_than_installed_is_refused_unless_that_downgrade_is_allowed(
    signed_package: Path, keys: Keys, now: datetime
) -> None:
    trusted = [read_public_key(keys[1])]
    error = refusal(signed_package, trusted, now, installed_release=6)
    assert error.kind == "rollback"
    assert error.reason == (
        "release 5 is lower than release 6 already loaded on this box (rollback attack); "
        "to go back on purpose set trust.allow_downgrade: {face_detection_short_range: 5}"
    )
    assert refusal(signed_package, trusted, now, installed_release=6, allowed_downgrade=4).kind == "rollback"
    assert verify_package(signed_package, trusted, now=now, installed_release=6, allowed_downgrade=5).release == 5
    assert verify_package(signed_package, trusted, now=now, installed_release=5).release == 5


def test_files_outside_the_manifest_are_reported_as_not_signed(signed_package: Path, keys: Keys, now: datetime) -> None:
    (signed_package / "report.md").write_text("conversion report")
    release = verify_package(signed_package, [read_public_key(keys[1])], now=now)
    assert release.unlisted == ("report.md",)


def test_signing_refuses_a_package_whose_files_do_not_match_its_manifest(
    package: Path, keys: Keys, now: datetime
) -> None:
    (package / "openvino" / "fp32" / "model.bin").write_bytes(b"truncated")
    with pytest.raises(EdgeRuntimeError, match=r"openvino/fp32/model.bin has sha256"):
        sign_package(package, keys[0], release=1, expires=now + timedelta(days=1), now=now)
    assert not (package / SIGNATURE_NAME).exists()


def test_a_public_key_cannot_sign(package: Path, keys: Keys, now: datetime) -> None:
    with pytest.raises(EdgeRuntimeError, match="is not an unencrypted PEM private key"):
        sign_package(package, keys[1], release=1, expires=now + timedelta(days=1), now=now)
