"""TLS towards the broker: the client's context, and failures described by what the operator must fix."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from paho.mqtt.client import Client

from edge_runtime.errors import ConfigError
from edge_runtime.mqtt.settings import TlsSettings

__all__ = ["configure_tls", "describe_failure"]

log = logging.getLogger(__name__)


def configure_tls(client: Client, tls: TlsSettings) -> None:
    """Load the pinned CA and client certificate now, so a wrong path fails at start with its name."""
    for name, path in (("ca_file", tls.ca_file), ("cert_file", tls.cert_file), ("key_file", tls.key_file)):
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"mqtt.tls.{name}: file {path} does not exist")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and, by default, the host name
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if tls.ca_file is not None:
            context.load_verify_locations(cafile=str(tls.ca_file))
        else:
            context.load_default_certs()
    except (ssl.SSLError, OSError) as err:
        raise ConfigError(f"mqtt.tls.ca_file: cannot load CA certificates from {tls.ca_file}: {err}") from err
    if tls.cert_file is not None:
        try:
            context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
        except (ssl.SSLError, OSError) as err:
            raise ConfigError(
                f"mqtt.tls: cannot load client certificate {tls.cert_file} with key {tls.key_file}: {err}"
            ) from err
    if not tls.verify_hostname:
        log.warning("MQTT: TLS hostname verification is off; the broker's certificate chain is still checked")
        context.check_hostname = False
    client.tls_set_context(context)


def describe_failure(error: BaseException | None, address: str, tls: TlsSettings | None) -> str:
    """Why connecting to the broker at `address` failed, naming the certificate check that refused it."""
    if isinstance(error, ssl.SSLCertVerificationError):
        trusted = f"pinned CA {tls.ca_file}" if tls and tls.ca_file else "the system CAs"
        reason = error.verify_message
        return f"TLS certificate of broker {address} not trusted ({reason}; checked against {trusted})"
    if isinstance(error, ssl.SSLError):
        return f"TLS handshake with broker {address} failed: {error.reason or error}"
    if error is None:
        return f"cannot connect to broker {address}"
    return f"cannot connect to broker {address}: {error}"


def describe_early_close(cause: str, address: str, tls: TlsSettings | None) -> str:
    """Why a broker closed a connection before accepting it, with the likely fix when TLS is in play.

    A TLS 1.3 broker that wants a client certificate says so only after the handshake, and its alert
    saying so can be lost when it closes the socket with the CONNECT still unread.
    """
    description = f"broker {address} closed the connection before accepting it: {cause}"
    if tls is not None and tls.cert_file is None and "certificate required" not in cause:
        description += "; if the broker requires a client certificate, set mqtt.tls.cert_file and mqtt.tls.key_file"
    return description
