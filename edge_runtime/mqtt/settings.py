"""Broker connection settings, as the daemon's config file gives them."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator

from edge_runtime.config.base import StrictModel


class TlsSettings(StrictModel):
    ca_file: Path | None = Field(default=None, description="pinned CA certificate (PEM); None uses the system CAs")
    cert_file: Path | None = Field(default=None, description="client certificate (PEM) for certificate login")
    key_file: Path | None = None
    verify_hostname: bool = True

    @model_validator(mode="after")
    def _cert_and_key_together(self) -> TlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file must be given together")
        return self


class SpoolSettings(StrictModel):
    """The on-disk queue of results not yet acknowledged by the broker."""

    path: Path | None = Field(default=None, description="SQLite file; default: <state dir>/spool.sqlite")
    max_bytes: int = Field(default=256 * 1024 * 1024, gt=0, description="oldest results are dropped beyond this")
    max_age_s: float = Field(default=7 * 24 * 3600, gt=0, description="results older than this are dropped")
    drain_rate: float = Field(default=500.0, gt=0, description="backlog messages per second after an outage")
    max_in_flight: int = Field(default=100, gt=0, description="unacknowledged QoS>=1 messages at once")


class MqttSettings(StrictModel):
    host: str = "localhost"
    port: int | None = Field(default=None, gt=0, lt=65536, description="default 1883, or 8883 with TLS")
    protocol: Literal["5", "3.1.1"] = "5"
    client_id: str | None = Field(
        default=None, description="stable id for a persistent session; default from device id"
    )
    username: str | None = None
    password: SecretStr | None = None
    keepalive_s: int = Field(default=30, ge=5)
    session_expiry_s: int = Field(
        default=24 * 3600, ge=0, description="MQTT 5: how long the broker keeps our session (subscriptions) offline"
    )
    reconnect_max_s: int = Field(default=60, ge=1, description="longest wait between reconnect attempts")
    tls: TlsSettings | None = None
    topic_prefix: str = Field(default="edge", pattern=r"^[^#+]+$")
    spool: SpoolSettings = Field(default_factory=SpoolSettings)

    @property
    def effective_port(self) -> int:
        return self.port or (8883 if self.tls else 1883)
