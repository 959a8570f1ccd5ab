"""The `serve:` section: models answered on request over HTTP and MQTT, their batching, and the endpoint's
limits. Everything here faces the network, so the defaults are the safe ones: loopback only, bounded
bodies, connections and waits, and a token that is long enough to be one.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from edge_runtime.config.base import StrictModel
from edge_runtime.config.model import ModelConfig
from edge_runtime.mqtt.topics import check_topic_name
from edge_runtime.sources.configs import DEFAULT_MAX_IMAGE_PIXELS

__all__ = ["MIN_TOKEN_LENGTH", "BatchingSettings", "HttpSettings", "ServeSettings", "ServedModelConfig"]


class BatchingSettings(StrictModel):
    """Triton's dynamic batching rule: a batch leaves when full or when its oldest request waited the delay."""

    max_batch_size: int = Field(
        default=0,
        ge=0,
        le=256,
        description="samples joined into one inference; 0 runs each request on its own, several in flight",
    )
    max_queue_delay_ms: float = Field(default=0.0, ge=0, le=10_000, description="longest wait for a batch to fill")
    max_queue_size: int = Field(default=64, ge=1, le=100_000, description="requests waiting; more are refused (503)")
    timeout_ms: float = Field(default=10_000.0, gt=0, description="a request still queued after this is refused")
    batch_when: Literal["faster", "always"] = Field(
        default="faster",
        description="faster: join requests into batches only where a measurement on this box shows batches beat "
        "single requests in flight (measured once, then remembered); always: wherever the model allows",
    )


class ServedModelConfig(ModelConfig):
    name: str = Field(description="the name requests use: /v2/models/<name>/infer", examples=["faces"])
    batching: BatchingSettings = Field(
        default_factory=BatchingSettings, description="how requests for this model are queued and joined into batches"
    )

    @field_validator("name")
    @classmethod
    def _url_and_topic_safe(cls, name: str) -> str:
        check_topic_name(name)
        if not all(c.isalnum() or c in "._-" for c in name):
            raise ValueError(f"{name!r}: use letters, digits, '.', '_' and '-' only")
        return name


# A bearer token is the only key to an endpoint off loopback, and it can be tried as fast as the endpoint answers.
# 16 characters is the least a generated token has (`openssl rand -hex 8`, 64 bits, already beyond guessing at
# any rate an HTTP endpoint sustains; `openssl rand -hex 16` gives 32); anything shorter is a word someone chose.
MIN_TOKEN_LENGTH = 16


class HttpSettings(StrictModel):
    enabled: bool = Field(default=True, description="false answers requests over MQTT only")
    host: str = Field(default="127.0.0.1", min_length=1, description="address to listen on; loopback by default")
    port: int = Field(default=8000, ge=0, lt=65536, description="TCP port; 0 lets the system choose a free one")
    token: SecretStr | None = Field(
        default=None, description="bearer token requests must carry (e.g. !credential serve-token); needed off loopback"
    )
    tls_cert_file: Path | None = Field(default=None, description="serve HTTPS with this certificate chain (PEM)")
    tls_key_file: Path | None = Field(default=None, description="the certificate's private key (PEM)")
    max_body_bytes: int = Field(default=16 << 20, ge=1024, description="larger requests are refused (413)")
    max_bytes_in_flight: int = Field(
        default=128 << 20,
        ge=1024,
        description="request bodies held at once, counted from their headers; a request past it is refused "
        "(503, Retry-After) before its body is read",
    )
    read_timeout_s: float = Field(default=10.0, gt=0, description="a body slower than this is dropped (408)")
    header_timeout_s: float = Field(
        default=10.0, gt=0, description="a connection that has not sent its request headers by then is closed"
    )
    max_connections: int = Field(
        default=512,
        ge=1,
        description="connections held at once; past it a new one pushes out the oldest still waiting for its "
        "headers (keep it under the process's descriptor limit, LimitNOFILE in the unit)",
    )

    @field_validator("token")
    @classmethod
    def _token_worth_its_name(cls, token: SecretStr | None) -> SecretStr | None:
        """An empty token made `Authorization: Bearer` with no value a key to every route; a short one is guessed."""
        if token is None:
            return None
        value = token.get_secret_value()
        if not value:
            raise ValueError(
                "is empty, which would let anyone in; give a generated token (openssl rand -hex 16), "
                "or leave token out to serve on loopback only"
            )
        if value != value.strip():
            raise ValueError("begins or ends with whitespace, which no Authorization header carries")
        if len(value) < MIN_TOKEN_LENGTH:
            raise ValueError(
                f"has {len(value)} characters, fewer than the {MIN_TOKEN_LENGTH} a token needs not to be guessed; "
                "give a generated one (openssl rand -hex 16)"
            )
        return token

    @model_validator(mode="after")
    def _token_off_loopback(self) -> HttpSettings:
        if self.enabled and self.token is None and not _is_loopback(self.host):
            raise ValueError(
                f"serving on {self.host}, off loopback, needs a token (token: !credential serve-token); "
                "or serve on 127.0.0.1 behind a reverse proxy that authenticates"
            )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        if self.max_bytes_in_flight < self.max_body_bytes:
            raise ValueError(
                f"max_bytes_in_flight ({self.max_bytes_in_flight}) is below max_body_bytes ({self.max_body_bytes}): "
                "the largest body allowed could never be taken"
            )
        return self


class ServeSettings(StrictModel):
    http: HttpSettings = Field(
        default_factory=HttpSettings, description="the Open Inference Protocol endpoint (KServe v2) over HTTP"
    )
    mqtt: bool = Field(default=True, description="also answer requests on <prefix>/<device_id>/infer/<model>")
    models: tuple[ServedModelConfig, ...] = Field(min_length=1, description="the models requests may name")
    share_group: str | None = Field(
        default=None,
        description="also take the fleet's requests, shared among the boxes of this group: "
        "$share/<group>/<prefix>/fleet/infer/<model>",
    )
    max_image_pixels: int = Field(
        default=DEFAULT_MAX_IMAGE_PIXELS,
        ge=1,
        description="an image request whose header declares more pixels is refused (413) before it is decoded",
    )

    @field_validator("share_group")
    @classmethod
    def _share_name(cls, group: str | None) -> str | None:
        """MQTT forbids / + # in a share name; '$' anywhere would make `$share/<group>/...` ambiguous to read."""
        if group is None:
            return None
        check_topic_name(group)
        if "$" in group:
            raise ValueError(f"{group!r} cannot be a share group: it contains '$'")
        return group

    @model_validator(mode="after")
    def _fleet_over_mqtt(self) -> ServeSettings:
        if self.share_group is not None and not self.mqtt:
            raise ValueError("share_group takes the fleet's requests over MQTT, but mqtt is false")
        return self

    @field_validator("models")
    @classmethod
    def _named_uniquely(cls, models: tuple[ServedModelConfig, ...]) -> tuple[ServedModelConfig, ...]:
        seen: dict[str, int] = {}
        for index, model in enumerate(models):
            if model.name in seen:
                raise ValueError(f"model name {model.name!r} is used by models[{seen[model.name]}] and models[{index}]")
            seen[model.name] = index
        return models


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
