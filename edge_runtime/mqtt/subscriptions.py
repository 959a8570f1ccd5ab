"""The subscriptions of one connection: what it wants, and what the broker has confirmed this session.

A SUBSCRIBE is only a request. Until its SUBACK arrives the broker may not route a message to the box,
and the SUBACK may say no: a broker's ACL refuses a topic with reason 0x87 (MQTT 5) or 0x80 (3.1.1),
after which nothing published there ever arrives, silently. So each SUBSCRIBE is remembered by its
message id until answered; a refusal is logged once with the topic and the broker's reason, and
`wait_confirmed` lets a caller start only once every subscription is in place.

A SUBACK can be handled by paho's network thread before `Client.subscribe` has returned its message id
to another thread; such an early answer is kept until the id is known. Other SUBACKs on the same client
(the QoS probe's) land there too, and are dropped when the next session starts.
"""

from __future__ import annotations

import logging
import threading

from paho.mqtt.client import Client
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.reasoncodes import ReasonCode

__all__ = ["Subscriptions"]

log = logging.getLogger(__name__)


class Subscriptions:
    """Wanted subscriptions (topic filter → QoS) and the confirmation state of the current session."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.refused: dict[str, str] = {}  # topic filter → the broker's reason, while it stands
        self._wanted: dict[str, int] = {}
        self._unconfirmed: dict[int, str] = {}  # SUBSCRIBE message id → topic filter
        self._answered_early: dict[int, ReasonCode] = {}
        self._sending = 0
        self._in_session = False
        self._lock = threading.Lock()
        self._confirmed = threading.Event()

    def want(self, subscription: str, qos: int) -> None:
        with self._lock:
            self._wanted[subscription] = qos

    def forget(self, subscription: str) -> None:
        with self._lock:
            self._wanted.pop(subscription, None)
            self.refused.pop(subscription, None)

    def session_started(self, client: Client) -> None:
        """Subscribe to everything wanted, in a session that may know none of it (paho's network thread)."""
        with self._lock:
            self._unconfirmed.clear()
            self._answered_early.clear()
            self._in_session = True
            wanted = list(self._wanted.items())
        for subscription, qos in wanted:
            self.send(client, subscription, qos)
        with self._lock:
            self._settle()

    def session_ended(self) -> None:
        with self._lock:
            self._in_session = False
            self._confirmed.clear()

    def send(self, client: Client, subscription: str, qos: int) -> None:
        with self._lock:
            self._sending += 1
            self._confirmed.clear()
        sent: int | None = None  # the SUBSCRIBE's message id; None when the connection dropped just now
        try:
            result, mid = client.subscribe(subscription, qos)
            sent = mid if result == MQTTErrorCode.MQTT_ERR_SUCCESS else None
        finally:
            with self._lock:
                self._sending -= 1
                if sent is not None:
                    early = self._answered_early.pop(sent, None)
                    if early is None:
                        self._unconfirmed[sent] = subscription
                    else:
                        self._judge(subscription, early)
                self._settle()

    def answered(self, mid: int, reason_codes: list[ReasonCode]) -> None:
        """A SUBACK arrived (paho's network thread)."""
        if not reason_codes:
            return
        with self._lock:
            subscription = self._unconfirmed.pop(mid, None)
            if subscription is None:
                self._answered_early[mid] = reason_codes[0]
                return
            self._judge(subscription, reason_codes[0])
            self._settle()

    def wait_confirmed(self, timeout: float) -> bool:
        """True once connected and every wanted subscription has been answered, granted or refused."""
        return self._confirmed.wait(timeout)

    def _settle(self) -> None:
        if self._in_session and not self._sending and not self._unconfirmed:
            self._confirmed.set()

    def _judge(self, subscription: str, reason: ReasonCode) -> None:
        if not reason.is_failure:
            self.refused.pop(subscription, None)
            return
        if self.refused.get(subscription) != str(reason):
            log.warning(
                "MQTT: the broker refused client %s the subscription to %s (%s): nothing published there will "
                "arrive; check the broker's ACL for this client",
                self.client_id,
                subscription,
                reason,
            )
        self.refused[subscription] = str(reason)
