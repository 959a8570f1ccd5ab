"""Broker connection settings, as the daemon's config file gives them."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import Field, SecretStr, field_validator, model_validator

from edge_runtime.config.base import StrictModel


class TlsSettings(StrictModel):
    ca_file: Path | None = Field(default=None, description="pinned CA certificate (PEM); null trusts the system CAs")
    cert_file: Path | None = Field(default=None, description="client certificate (PEM) for certificate login")
    key_file: Path | None = Field(
        default=None, description="the client certificate's private key (PEM); given together with cert_file"
    )
    verify_hostname: bool = Field(
        default=True,
        description="check that the broker's certificate names the host connected to; false only for test brokers "
        "reached by an address their certificate does not name",
    )

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


class BrokerAddress(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class MqttSettings(StrictModel):
    host: str = Field(default="localhost", description="the broker's host name or address; a single broker")
    port: int | None = Field(default=None, gt=0, lt=65536, description="default 1883, or 8883 with TLS")
    hosts: list[str] = Field(
        default_factory=list,
        description="the nodes of a broker cluster as host[:port], instead of host and port (leave those two out); "
        "the first is preferred",
    )
    protocol: Literal["5", "3.1.1"] = Field(
        default="5", description='MQTT version; "3.1.1" for brokers without MQTT 5 (RabbitMQ before 3.13, NATS 2.9)'
    )
    client_id: str | None = Field(
        default=None, description="stable id for a persistent session; default from device id"
    )
    username: str | None = Field(default=None, description="broker login; null connects without one")
    password: SecretStr | None = Field(
        default=None, description="the login's password; give it as !credential NAME or ${NAME}, never in the file"
    )
    keepalive_s: int = Field(
        default=30,
        ge=5,
        description="seconds between keepalive pings; the broker drops a box silent for 1.5 times this and "
        "publishes its offline status",
    )
    session_expiry_s: int = Field(
        default=24 * 3600, ge=0, description="MQTT 5: how long the broker keeps our session (subscriptions) offline"
    )
    reconnect_max_s: int = Field(default=60, ge=1, description="longest wait between reconnect attempts")
    tls: TlsSettings | None = Field(
        default=None, description="connect over TLS (port 8883 unless given); null: plain TCP"
    )
    topic_prefix: str = Field(
        default="edge",
        pattern=r"^[^#+]+$",
        description="first level of every topic the box uses: <topic_prefix>/<device_id>/...",
    )
    spool: SpoolSettings = Field(
        default_factory=SpoolSettings, description="the on-disk queue that keeps results while the broker is away"
    )

    @field_validator("hosts")
    @classmethod
    def _addresses_parse(cls, hosts: list[str]) -> list[str]:
        seen: set[tuple[str, int | None]] = set()
        for index, entry in enumerate(hosts):
            address = _split_address(entry)
            if address is None:
                raise ValueError(f"hosts[{index}]: {entry!r} is not host, host:port or [IPv6 address]:port")
            if address in seen:
                raise ValueError(f"hosts[{index}]: {entry!r} is named twice")
            seen.add(address)
        return hosts

    @model_validator(mode="after")
    def _one_way_to_name_the_broker(self) -> MqttSettings:
        if self.hosts and {"host", "port"} & self.model_fields_set:
            raise ValueError("give the broker either as hosts or as host and port, not both")
        return self

    @property
    def effective_port(self) -> int:
        return self.port or self.default_port

    @property
    def default_port(self) -> int:
        return 8883 if self.tls else 1883

    @property
    def brokers(self) -> list[BrokerAddress]:
        """Every broker node to connect to, in the order given; one when the config names `host`."""
        if not self.hosts:
            return [BrokerAddress(self.host, self.effective_port)]
        addresses = []
        for entry in self.hosts:
            host, port = _split_address(entry) or (entry, None)
            addresses.append(BrokerAddress(host, port or self.default_port))
        return addresses


def _split_address(entry: str) -> tuple[str, int | None] | None:
    """`host`, `host:port`, `[v6]` or `[v6]:port` as (host, port or None); None when malformed."""
    host, port_text = entry, ""
    if entry.startswith("["):
        inside, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        host, port_text = inside, rest[1:]
    elif entry.count(":") == 1:
        host, port_text = entry.split(":")
    if not host or any(c in host for c in " /[]") or (port_text == "" and entry.endswith(":")):
        return None
    if not port_text:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return host, int(port_text)
