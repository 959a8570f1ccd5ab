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
    """`maximum` is the highest QoS the broker of the current session takes; None while not known.

    The publisher's thread asks `allows` while paho's thread runs the probe, so the probe is marked pending
    before its SUBSCRIBE leaves and cleared only once `maximum` holds the answer: no moment in between lets
    a QoS 2 message through to a broker that would close the connection over it."""

    def __init__(self, probe_topic: str) -> None:
        self.probe_topic = probe_topic
        self.wanted = False  # set when something publishes at QoS 2: only then is 3.1.1's probe worth a round trip
        self.maximum: int | None = None
        self.source = ""  # how `maximum` was learnt, for the error that names it
        self._probing = False
        self._probe_mid: int | None = None

    def connected(self, client: Client, mqtt5: bool, properties: Properties | None) -> None:
        if not mqtt5 and self.wanted:
            self._probing = True  # before anything else: from now until the answer, QoS 2 waits
            self.maximum = None
            self._probe_mid = client.subscribe(self.probe_topic, 2)[1]
            return
        self._probing = False
        if mqtt5:
            self.maximum = int(getattr(properties, "MaximumQoS", 2))
            self.source = "its CONNACK's Maximum QoS"
        else:
            self.maximum, self.source = None, ""

    def subscribed(self, client: Client, mid: int, reason_codes: list[ReasonCode]) -> None:
        if not self._probing or mid != self._probe_mid or not reason_codes:
            return
        granted = reason_codes[0].value
        if granted == _REFUSED:
            log.warning(
                "MQTT: the broker refused a subscription to %s, so its QoS 2 support is unknown; sending QoS 2 "
                "as configured",
                self.probe_topic,
            )
            self.maximum, self.source = 2, "unknown"
        else:
            self.maximum, self.source = granted, f"it granted QoS {granted} to a QoS 2 subscription"
        self._probing = False
        client.unsubscribe(self.probe_topic)

    def allows(self, qos: int) -> bool | None:
        """Whether a message at `qos` may be sent now; None while the probe's answer is awaited."""
        if qos < 2:
            return True
        if self._probing:
            return None
        return self.maximum is None or qos <= self.maximum
