"""Signed commands: one that passes every check is taken, and each refusal names the check it failed."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.control.signed import CommandRefused, NonceStore, sign_command, verify_command
from edge_runtime.package.signing import TrustedKey, generate_keys, read_public_key

NOW = datetime(2026, 11, 24, 9, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TrustedKey, Path]:
    root = tmp_path_factory.mktemp("keys")
    private, public = generate_keys("ops", root)
    stranger, _ = generate_keys("stranger", root)
    return private, read_public_key(public), stranger


def verify(document: Any, trusted: TrustedKey, nonces: NonceStore, now: datetime = NOW, device: str = "gate-3") -> Any:
    return verify_command(document, [trusted], device, nonces, max_lifetime_s=3600, max_clock_skew_s=300, now=now)


def test_a_signed_command_for_this_box_is_taken_once(keys: tuple[Path, TrustedKey, Path], tmp_path: Path) -> None:
    private, trusted, _ = keys
    document = sign_command(private, "gate-3", "pipeline disable", {"name": "door"}, now=NOW)
    command = verify(document, trusted, NonceStore(tmp_path))
    assert (command.name, command.args, command.key_id) == ("pipeline disable", {"name": "door"}, trusted.key_id)
    with pytest.raises(CommandRefused, match="replayed") as again:
        verify(document, trusted, NonceStore(tmp_path))  # a new store on the same directory: as after a restart
    assert again.value.kind == "replayed"


def tampered(document: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**document, **fields}


@pytest.mark.parametrize(
    ("change", "kind", "message"),
    [
        (lambda d, s: {k: v for k, v in d.items() if k != "signature"}, "unsigned", "unsigned: not a signed command"),
        (lambda d, s: "status", "unsigned", "unsigned: not a signed command"),
        (lambda d, s: tampered(d, args={"name": "yard"}), "bad_signature", "bad signature"),
        (lambda d, s: tampered(d, command="config apply"), "bad_signature", "bad signature"),
        (lambda d, s: tampered(d, signature="!!!"), "bad_signature", "bad signature"),
        (lambda d, s: sign_command(s, "gate-3", "status", now=NOW), "unknown_key", "signed by unknown key"),
    ],
)
def test_refused_before_anything_runs(
    keys: tuple[Path, TrustedKey, Path], tmp_path: Path, change: Any, kind: str, message: str
) -> None:
    private, trusted, stranger = keys
    document = change(sign_command(private, "gate-3", "pipeline disable", {"name": "door"}, now=NOW), stranger)
    with pytest.raises(CommandRefused, match=message) as refused:
        verify(document, trusted, NonceStore(tmp_path))
    assert refused.value.kind == kind
    assert not (tmp_path / "command-nonces.json").exists()  # a refused command uses up no nonce


def test_a_command_for_another_box_is_refused(keys: tuple[Path, TrustedKey, Path], tmp_path: Path) -> None:
    private, trusted, _ = keys
    document = sign_command(private, "gate-4", "status", now=NOW)
    with pytest.raises(CommandRefused, match="signed for box 'gate-4', not this one"):
        verify(document, trusted, NonceStore(tmp_path))


@pytest.mark.parametrize(
    ("issued", "lifetime", "kind", "message"),
    [
        (NOW - timedelta(hours=2), 600, "expired", "expired at 2026-11-24T07:10:00Z"),
        (NOW + timedelta(minutes=10), 600, "future", "in the future"),
        (NOW, 7200, "lifetime", "valid for longer than 3600 s"),
    ],
)
def test_times_outside_the_window_are_refused(
    keys: tuple[Path, TrustedKey, Path], tmp_path: Path, issued: datetime, lifetime: float, kind: str, message: str
) -> None:
    private, trusted, _ = keys
    document = sign_command(private, "gate-3", "status", lifetime_s=lifetime, now=issued)
    with pytest.raises(CommandRefused, match=message) as refused:
        verify(document, trusted, NonceStore(tmp_path))
    assert refused.value.kind == kind


def test_a_clock_a_little_behind_the_operators_is_tolerated(
    keys: tuple[Path, TrustedKey, Path], tmp_path: Path
) -> None:
    private, trusted, _ = keys
    document = sign_command(private, "gate-3", "status", now=NOW + timedelta(seconds=120))
    assert verify(document, trusted, NonceStore(tmp_path)).name == "status"


def test_nonces_are_kept_until_their_command_expires_and_no_longer(
    keys: tuple[Path, TrustedKey, Path], tmp_path: Path
) -> None:
    private, trusted, _ = keys
    nonces = NonceStore(tmp_path)
    first = sign_command(private, "gate-3", "status", lifetime_s=60, now=NOW)
    verify(first, trusted, nonces)
    later = NOW + timedelta(minutes=5)
    verify(sign_command(private, "gate-3", "status", lifetime_s=60, now=later), trusted, nonces, now=later)
    kept = json.loads((tmp_path / "command-nonces.json").read_text())
    assert list(kept) != [first["nonce"]] and first["nonce"] not in kept and len(kept) == 1


def test_an_unreadable_nonce_store_refuses_rather_than_forgets(
    keys: tuple[Path, TrustedKey, Path], tmp_path: Path
) -> None:
    private, trusted, _ = keys
    (tmp_path / "command-nonces.json").write_text("{broken")
    with pytest.raises(CommandRefused, match="unreadable") as refused:
        verify(sign_command(private, "gate-3", "status", now=NOW), trusted, NonceStore(tmp_path))
    assert refused.value.kind == "busy"
