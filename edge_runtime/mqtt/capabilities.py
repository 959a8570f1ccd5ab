"""The highest QoS a broker takes, found out at each connect, so that QoS 2 is never downgraded silently.

An MQTT 5 broker states it in CONNACK (Maximum QoS; absent means 2). MQTT 3.1.1 has no such field, and
brokers that speak only 3.1.1 differ: Mosquitto does QoS 2, RabbitMQ before 3.13 and NATS before 2.10 do
not. What 3.1.1 does have is the granted QoS in SUBACK: a broker without QoS 2 grants at most 1 to a
QoS 2 subscription. So when something on the box publishes at QoS 2, the connection subscribes to a
topic of its own at QoS 2 once per session, reads the grant, and unsubscribes.
"""

from __future__ import annotations

import logging

from paho.mqtt.client import Client
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

__all__ = ["QosCheck"]

log = logging.getLogger(__name__)
_REFUSED = 0x80


class QosCheck:
    """`maximum` is the highest QoS the broker of the current session takes; None while not known."""

    def __init__(self, probe_topic: str) -> None:
        self.probe_topic = probe_topic
        self.wanted = False  # set when something publishes at QoS 2: only then is 3.1.1's probe worth a round trip
        self.maximum: int | None = None
        self.source = ""  # how `maximum` was learnt, for the error that names it
        self._probe_mid: int | None = None

    def connected(self, client: Client, mqtt5: bool, properties: Properties | None) -> None:
        self._probe_mid = None
        if mqtt5:
            self.maximum = int(getattr(properties, "MaximumQoS", 2))
            self.source = "its CONNACK's Maximum QoS"
        elif self.wanted:
            self.maximum = None
            self._probe_mid = client.subscribe(self.probe_topic, 2)[1]
        else:
            self.maximum, self.source = None, ""

    def subscribed(self, client: Client, mid: int, reason_codes: list[ReasonCode]) -> None:
        if mid != self._probe_mid or not reason_codes:
            return
        self._probe_mid = None
        granted = reason_codes[0].value
        client.unsubscribe(self.probe_topic)
        if granted == _REFUSED:
            log.warning(
                "MQTT: the broker refused a subscription to %s, so its QoS 2 support is unknown; sending QoS 2 "
                "as configured",
                self.probe_topic,
            )
            self.maximum, self.source = 2, "unknown"
            return
        self.maximum = granted
        self.source = f"it granted QoS {granted} to a QoS 2 subscription"

    def allows(self, qos: int) -> bool | None:
        """Whether a message at `qos` may be sent now; None while the probe's answer is awaited."""
        if qos < 2:
            return True
        if self.maximum is None:
            return None if self._probe_mid is not None else True
        return qos <= self.maximum
