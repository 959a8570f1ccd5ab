"""The `control:` section of the daemon's config: which operators may command this box over MQTT.

A box without keys here takes no command at all. The keys are operators' Ed25519 public keys, apart
from the keys that sign model packages: the people who build models and the people who run the fleet
need not be the same, and losing one key must not hand over the other power.
"""

from __future__ import annotations

from pydantic import Field

from edge_runtime.config.base import StrictModel
from edge_runtime.config.trust import KeyEntry

__all__ = ["ControlSettings"]


class ControlSettings(StrictModel):
    keys: tuple[KeyEntry, ...] = Field(
        default=(),
        description="operators' public keys: paths to .pub files (relative to the config file) or {pem: ...}; "
        "without any, the box takes no remote command",
    )
    max_lifetime_s: float = Field(
        default=3600.0, gt=0, le=7 * 86400, description="longest a command may be valid, from issue to expiry"
    )
    max_clock_skew_s: float = Field(
        default=300.0, ge=0, le=3600, description="how far in the future a command's issue time may lie"
    )
