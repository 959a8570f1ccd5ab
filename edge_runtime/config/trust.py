"""The `trust:` section of the daemon's config: which keys sign the model packages this box loads.

Kept apart from the rest of the schema because its keys are checked with the package signing code,
which the other settings have no need to import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, Field, field_validator, model_validator

from edge_runtime.config.base import StrictModel

__all__ = ["InlineKey", "KeyEntry", "TrustSettings"]


class InlineKey(StrictModel):
    """A trusted public key written into the config itself rather than kept in a file beside it."""

    pem: str = Field(description="the Ed25519 public key in PEM, as `edge-runtime keys new` writes NAME.pub")

    @field_validator("pem")
    @classmethod
    def _ed25519_public_key(cls, pem: str) -> str:
        from edge_runtime.package.signing import TrustedKey

        TrustedKey.from_pem(pem.encode(), "config")  # its ValueError is reported at this field
        return pem


def _key_entry(value: object) -> object:
    """A mapping is made an InlineKey here, so that a bad one is one problem at `keys[i].pem` rather than one
    per member of the union."""
    if not isinstance(value, dict):
        return value
    if set(value) != {"pem"} or not isinstance(value["pem"], str):
        raise ValueError("an inline key is a mapping with one field, pem: the text of an Ed25519 public key")
    return InlineKey(pem=value["pem"])


KeyEntry = Annotated[Path | InlineKey, BeforeValidator(_key_entry)]
"""A trusted public key: the path of a .pub file (relative to the config file), or {pem: ...}."""


class TrustSettings(StrictModel):
    """Which signed model packages this box loads: see docs/operating/fleets.md, "Signed model packages"."""

    keys: tuple[KeyEntry, ...] = Field(
        default=(),
        description="trusted public keys: paths to .pub files (relative to the config file) or {pem: ...}; "
        "several, so a new key can be trusted before the old one is retired",
    )
    require_signed: bool | None = Field(
        default=None,
        description="refuse every model package without a valid signature; default: true once any key is listed",
    )
    allow_downgrade: dict[str, int] = Field(
        default_factory=dict,
        description="package name to the one lower release this box may load, e.g. {face_detection: 3}",
    )

    @field_validator("allow_downgrade")
    @classmethod
    def _releases_not_negative(cls, allowed: dict[str, int]) -> dict[str, int]:
        for name, release in allowed.items():
            if release < 0:
                raise ValueError(f"{name}: a release is 0 or more, got {release}")
        return allowed

    @model_validator(mode="after")
    def _keys_when_required(self) -> TrustSettings:
        if self.require_signed and not self.keys:
            raise ValueError("require_signed needs at least one key in trust.keys, or every model would be refused")
        return self

    @property
    def signatures_required(self) -> bool:
        return bool(self.keys) if self.require_signed is None else self.require_signed
