"""Operators' commands, signed: who may command a box is who holds a key it trusts, not who can reach the broker.

A command is one JSON object:

    {"format": "edge-runtime-command/1", "key_id": "3f2a...", "device_id": "gate-3",
     "command": "rollout start", "args": {...},
     "issued_at": "2026-11-24T09:00:00Z", "expires_at": "2026-11-24T09:10:00Z",
     "nonce": "9c1e...", "signature": "<base64 Ed25519 over the rest>"}

The signature covers every other field in canonical JSON, behind a prefix no package signature has,
so neither kind of signature passes for the other. A box takes the command only if, in this order,
the key is one of `control.keys`, the signature verifies, it names this box (a command signed for one
box cannot be replayed at another), it was issued no later than `max_clock_skew_s` from now, it has
not expired, its lifetime is at most `max_lifetime_s`, and its nonce was never seen here. Nonces are
kept, durably, until their command expires, which is why lifetimes are bounded: the store stays small
and a restart does not reopen a replay window.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature

from edge_runtime.durable import replace_file
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.signing import (
    TrustedKey,
    canonical_json,
    format_time,
    key_id_of,
    load_private_key,
    parse_time,
)

__all__ = ["COMMAND_FORMAT", "Command", "CommandRefused", "NonceStore", "sign_command", "verify_command"]

COMMAND_FORMAT = "edge-runtime-command/1"
_DOMAIN = b"edge-runtime command\n"
_SIGNED_FIELDS = ("format", "key_id", "device_id", "command", "args", "issued_at", "expires_at", "nonce")
_NONCE = re.compile(r"^[0-9a-f]{16,64}$")
MAX_NONCES = 100_000


class CommandRefused(EdgeRuntimeError):  # noqa: N818 - answered to the sender, like PackageRefused
    """A command the box will not take; `kind` names the check that failed, for counting and for tests."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(f"command refused: {reason}")
        self.reason = reason
        self.kind = kind


@dataclass(frozen=True)
class Command:
    name: str
    args: dict[str, Any]
    key_id: str
    nonce: str
    expires_at: datetime


def sign_command(
    private_key_path: Path,
    device_id: str,
    command: str,
    args: dict[str, Any] | None = None,
    *,
    lifetime_s: float = 600.0,
    now: datetime | None = None,
) -> dict[str, Any]:
    """A signed command for `device_id`, valid for `lifetime_s` from `now`."""
    private = load_private_key(private_key_path)
    issued = (now or datetime.now(timezone.utc)).replace(microsecond=0)
    statement = {
        "format": COMMAND_FORMAT,
        "key_id": key_id_of(private.public_key()),
        "device_id": device_id,
        "command": command,
        "args": args or {},
        "issued_at": format_time(issued),
        "expires_at": format_time(issued + timedelta(seconds=lifetime_s)),
        "nonce": secrets.token_hex(16),
    }
    signature = private.sign(_DOMAIN + canonical_json(statement))
    return statement | {"signature": base64.b64encode(signature).decode()}


def verify_command(
    document: Any,
    trusted: list[TrustedKey],
    device_id: str,
    nonces: NonceStore,
    *,
    max_lifetime_s: float,
    max_clock_skew_s: float,
    now: datetime | None = None,
) -> Command:
    """The command `document` holds, once every check passed; CommandRefused names the first that failed."""
    if not isinstance(document, dict) or set(document) != {*_SIGNED_FIELDS, "signature"}:
        raise CommandRefused("unsigned: not a signed command (fields missing or extra)", "unsigned")
    if document["format"] != COMMAND_FORMAT:
        raise CommandRefused(f"format {str(document['format'])[:40]!r}; this box reads {COMMAND_FORMAT}", "unsigned")
    keys = {key.key_id: key for key in trusted}
    key = keys.get(str(document["key_id"]))
    if key is None:
        raise CommandRefused(f"signed by unknown key {str(document['key_id'])[:40]}", "unknown_key")
    try:
        signature = base64.b64decode(str(document["signature"]), validate=True)
        statement = {field: document[field] for field in _SIGNED_FIELDS}
        key.public_key.verify(signature, _DOMAIN + canonical_json(statement))
    except (binascii.Error, InvalidSignature, TypeError, ValueError):
        raise CommandRefused(f"bad signature for key {key.key_id}", "bad_signature") from None
    if document["device_id"] != device_id:
        raise CommandRefused(f"signed for box {str(document['device_id'])[:80]!r}, not this one", "other_box")
    try:
        issued = parse_time(document["issued_at"], "issued_at")
        expires = parse_time(document["expires_at"], "expires_at")
    except ValueError as error:
        raise CommandRefused(str(error), "unsigned") from None
    moment = now or datetime.now(timezone.utc)
    if issued > moment + timedelta(seconds=max_clock_skew_s):
        raise CommandRefused(f"issued at {format_time(issued)}, in the future (now {format_time(moment)})", "future")
    if moment >= expires:
        raise CommandRefused(f"expired at {format_time(expires)} (now {format_time(moment)})", "expired")
    if (expires - issued).total_seconds() > max_lifetime_s:
        raise CommandRefused(f"valid for longer than {max_lifetime_s:.0f} s", "lifetime")
    nonce, name, args = document["nonce"], document["command"], document["args"]
    if not isinstance(nonce, str) or not _NONCE.match(nonce):
        raise CommandRefused("the nonce must be 16 to 64 lower-case hex digits", "unsigned")
    if not isinstance(name, str) or not isinstance(args, dict):
        raise CommandRefused("command must be a string and args a mapping", "unsigned")
    nonces.take(nonce, expires, moment)
    return Command(name, args, key.key_id, nonce, expires)


class NonceStore:
    """`<state_dir>/command-nonces.json`: every nonce taken, until its command expires."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "command-nonces.json"

    def take(self, nonce: str, expires: datetime, now: datetime) -> None:
        """Record `nonce`; CommandRefused if it was taken before (a replay), or if the store is full."""
        seen = {n: t for n, t in self._read().items() if t > now.timestamp()}
        if nonce in seen:
            raise CommandRefused(f"replayed: nonce {nonce} was used before", "replayed")
        if len(seen) >= MAX_NONCES:
            raise CommandRefused("too many commands still valid; try again when some have expired", "busy")
        seen[nonce] = expires.timestamp()
        replace_file(self.path, json.dumps(seen))

    def _read(self) -> dict[str, float]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            # Forgetting the nonces would reopen replays: refuse commands until someone looks.
            raise CommandRefused(f"the nonce store {self.path} is unreadable ({error})", "busy") from None
        if not isinstance(data, dict):
            raise CommandRefused(f"the nonce store {self.path} is not a mapping", "busy")
        return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}
