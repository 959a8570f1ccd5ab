"""What sits between paho and the connection: message dispatch, paho's error lines, waiting on a publish."""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

from paho.mqtt.client import Client, MQTTMessage, MQTTMessageInfo
from paho.mqtt.properties import Properties

from edge_runtime.mqtt.acks import InOrderAcks, Settle, settled

__all__ = ["MessageHandler", "PahoErrors", "RequestHandler", "dispatcher", "read_until_published", "wait_quietly"]

log = logging.getLogger(__name__)

MessageHandler = Callable[[str, bytes], None]
# A request: its topic, payload, (MQTT 5) its properties, e.g. ResponseTopic and CorrelationData, and
# what to call once it is answered or dropped (it acknowledges the request on a connection with a window).
RequestHandler = Callable[[str, bytes, Properties | None, Settle], None]


class PahoErrors(logging.Filter):
    """Keeps paho's last error (a TLS alert arrives only as a log line) and hides its retry noise."""

    def __init__(self) -> None:
        super().__init__()
        self.last = ""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Client is not connected"):
            return False  # logged on every loop turn while retrying; our warning already says why
        if record.levelno >= logging.ERROR:
            self.last = record.getMessage()
        return True


def dispatcher(
    topic: str, handler: RequestHandler, acks: InOrderAcks | None
) -> Callable[[Client, Any, MQTTMessage], None]:
    def dispatch(client: Client, userdata: Any, message: MQTTMessage) -> None:
        settle = settled if acks is None else acks.received(message.mid, message.qos)
        try:
            handler(message.topic, bytes(message.payload), getattr(message, "properties", None), settle)
        except Exception:
            settle()
            log.exception("MQTT: handler for %s failed on a message from %s", topic, message.topic)

    return dispatch


def wait_quietly(info: MQTTMessageInfo, timeout: float) -> None:
    # Not connected any more raises; then the broker's will says "offline" for us.
    with contextlib.suppress(RuntimeError, ValueError):
        info.wait_for_publish(timeout)


def read_until_published(client: Client, info: MQTTMessageInfo, timeout: float) -> None:
    """Read the client's socket until `info` is acknowledged, for a client without a network thread.

    Through epoll, not paho's `loop`, whose select() cannot watch descriptors past 1023, as a process
    driving hundreds of connections has."""
    sock = client.socket()
    if not isinstance(sock, socket.socket):
        return
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        while not info.is_published() and client.is_connected() and (left := deadline - time.monotonic()) > 0:
            if client.want_write():
                client.loop_write()
            if selector.select(min(left, 0.05)):
                client.loop_read()
