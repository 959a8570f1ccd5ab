"""`edge-runtime keys` and `edge-runtime package`: what an operator types, and what they read back."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from edge_runtime.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_keys_sign_verify_and_pack_as_an_operator_would(
    package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = tmp_path / "keys"
    status, out, _ = run(capsys, "keys", "new", "ops", "--dir", str(keys))
    assert status == 0 and f"private key: {keys / 'ops.key'}" in out
    assert "in trust.keys to sign packages" in out and "in control.keys to sign operator commands" in out
    assert stat.S_IMODE((keys / "ops.key").stat().st_mode) == 0o600

    status, out, _ = run(capsys, "package", "sign", str(package), "--key", str(keys / "ops.key"), "--release", "4")
    assert status == 0 and out.startswith(f"signed {package} as release 4, valid until ")
    assert json.loads((package / "signature.json").read_text())["release"] == 4

    status, out, _ = run(capsys, "package", "verify", str(package), "--trust", str(keys / "ops.pub"))
    assert status == 0
    assert out.startswith(f"{package}: ok: face_detection_short_range version 0.10.14 release 4, signed by key ")

    archive = tmp_path / "face.tar.gz"
    assert run(capsys, "package", "pack", str(package), "-o", str(archive))[:2] == (0, f"{archive}\n")
    status, _, err = run(
        capsys, "package", "verify", str(archive), "--trust", str(keys / "ops.pub"), "--installed-release", "5"
    )
    assert status == 2
    assert err.startswith(f"edge-runtime: error: package {archive} refused: release 4 is lower than release 5")


def test_verify_exits_non_zero_with_the_reason_for_a_tampered_package(
    signed_package: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = signed_package / "model.yaml"
    manifest.write_text(manifest.read_text().replace("labels: [face]", "labels: [cat]"))
    status, out, err = run(capsys, "package", "verify", str(signed_package), "--trust", str(keys[1]))
    assert (status, out) == (2, "")
    assert err.startswith(
        f"edge-runtime: error: package {signed_package} refused: model.yaml changed after it was signed"
    )


@pytest.mark.parametrize("mode", [0o644, 0o666, 0o640, 0o604], ids=lambda mode: f"{mode:04o}")
def test_a_private_key_others_may_read_is_refused_naming_the_fix(
    package: Path, keys: tuple[Path, Path], mode: int, capsys: pytest.CaptureFixture[str]
) -> None:
    private = keys[0]
    private.chmod(mode)
    for command in (
        ["package", "sign", str(package), "--key", str(private), "--release", "4"],
        ["fleet", "--key", str(private), "--host", "127.0.0.1", "--port", "1", "status"],  # said before connecting
    ):
        status, out, err = run(capsys, *command)
        assert (status, out) == (2, "")
        assert err == (
            f"edge-runtime: error: private key {private} has mode {mode:04o}: group or others may read or change it, "
            f"so it is not used; run `chmod 600 {private}` (and make a new key if others may have read it)\n"
        )
    assert not (package / "signature.json").exists()
    private.chmod(0o400)  # read-only for its owner is as private as 0600
    assert run(capsys, "package", "sign", str(package), "--key", str(private), "--release", "4")[0] == 0


def test_a_dangling_key_path_is_one_line(package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    link = tmp_path / "ops.key"
    link.symlink_to(tmp_path / "gone" / "ops.key")
    for command in (
        ["package", "sign", str(package), "--key", str(link), "--release", "4"],
        ["fleet", "--key", str(link), "--host", "127.0.0.1", "--port", "1", "status"],
    ):
        status, out, err = run(capsys, *command)
        assert (status, out) == (2, "")
        assert err == (
            f"edge-runtime: error: cannot read private key {link}: it is a link to {tmp_path / 'gone' / 'ops.key'}, "
            "which does not exist\n"
        )
