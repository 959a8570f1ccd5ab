"""The daemon's one broker connection: a typed wrapper over a paho-mqtt 2.x client.

paho runs the network loop in its own thread and reconnects by itself with an exponential backoff; this
class adds what a long-running device needs around it: a stable client id with a persistent session, a
retained birth/will pair on `<prefix>/<device id>/status`, subscriptions that come back after the broker
restarts, counters for the stats topic, and errors that say which file or credential is wrong without
ever writing the password anywhere.

paho keeps unacknowledged messages in memory and re-sends all of them at once after a reconnect, ignoring
its in-flight limit. This connection drops that queue at every connect instead: delivery guarantees
belong to `Publisher`, which keeps every QoS >= 1 message in its spool until the broker acknowledges it
and paces the re-sends itself. A QoS >= 1 message sent with `publish` directly and not acknowledged before
a disconnect is therefore forgotten.

Given several broker nodes (`mqtt.hosts`), whenever the node in use or being tried is lost the next
attempt goes to the next node (`failover`), after the same jittered backoff as every reconnect.

A box may open a second, companion connection for requests it takes from a shared subscription: its
session ends with it, so when the box dies the broker stops handing it the group's messages at once,
instead of queueing them for a session that may never come back (Mosquitto's round robin does not
skip disconnected members). It says nothing on the status topic, which belongs to the main connection.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from paho.mqtt.client import Client, ConnectFlags, DisconnectFlags
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from edge_runtime.backoff import Backoff
from edge_runtime.errors import ConfigError
from edge_runtime.mqtt.acks import InOrderAcks
from edge_runtime.mqtt.callbacks import (
    MessageHandler,
    PahoErrors,
    RequestHandler,
    dispatcher,
    read_until_published,
    wait_quietly,
)
from edge_runtime.mqtt.capabilities import QosCheck
from edge_runtime.mqtt.failover import BrokerRotation
from edge_runtime.mqtt.settings import BrokerAddress, MqttSettings
from edge_runtime.mqtt.subscriptions import Subscriptions
from edge_runtime.mqtt.tls import configure_tls, describe_early_close, describe_failure
from edge_runtime.mqtt.topics import Topics, shared

log = logging.getLogger(__name__)
PAHO_LOGGER = "edge_runtime.mqtt.paho"
RECONNECT_JITTER = 0.2  # each wait is spread by up to ±20 %, so a fleet that lost a node does not return in step

AckHandler = Callable[[int, bool], None]  # message id, and False when the broker refused the message (MQTT 5)
ConnectListener = Callable[[int], None]  # the new connect_count; called in paho's thread before `connected` is set


class MqttConnection:
    """One paho client, connected in the background and reconnected after every outage."""

    def __init__(
        self,
        settings: MqttSettings,
        device_id: str,
        *,
        reconnect_min_s: int = 1,
        companion: str | None = None,
        window: int | None = None,
    ) -> None:
        """`companion` names a connection beside the box's main one (see the module docstring). `window`
        is the MQTT 5 Receive Maximum to ask for; with it, a request is acknowledged once settled."""
        self.settings = settings
        self.device_id = device_id
        self.companion = companion
        self.window = window
        self.client_id = settings.client_id or device_id
        if companion is not None:
            self.client_id = f"{self.client_id}-{companion}"
        self.status_topic = Topics(settings.topic_prefix, device_id).status
        self.connected = False
        self.connect_count = 0  # successful connects; a change tells the publisher a new session began
        self.reconnects = 0
        self.last_error = ""
        self.receive_maximum: int | None = None  # MQTT 5: how many unacknowledged messages the broker accepts
        self.qos = QosCheck(Topics(settings.topic_prefix, device_id).qos_check)
        self.brokers = BrokerRotation(settings.brokers, self.client_id)
        self._backoff = Backoff(reconnect_min_s, max(reconnect_min_s, settings.reconnect_max_s), RECONNECT_JITTER)
        self._next_attempt_at = 0.0  # monotonic time; used when the caller drives the network
        self._own_thread = True
        self._reconnect_min_s = reconnect_min_s
        self._ack_handler: AckHandler | None = None
        self._connect_listeners: list[ConnectListener] = []
        self.subscriptions = Subscriptions(self.client_id)
        self._acks: InOrderAcks | None = None
        self._lock = threading.Lock()
        self._connected_event = threading.Event()
        self._started = False
        self._stopping = False
        self._paho_logger = logging.getLogger(f"{PAHO_LOGGER}.{self.client_id}")
        self._paho_errors = PahoErrors()
        self._client = self._make_client()

    # -- setup -------------------------------------------------------------------------------------

    def _make_client(self) -> Client:
        settings = self.settings
        v5 = settings.protocol == "5"
        client = Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            clean_session=None if v5 else self.companion is not None,
            protocol=MQTTProtocolVersion.MQTTv5 if v5 else MQTTProtocolVersion.MQTTv311,
            manual_ack=self.window is not None,
        )
        if self.window is not None:
            self._acks = InOrderAcks(client.ack)
        client.enable_logger(self._paho_logger)
        client.suppress_exceptions = True  # a failing callback is logged; it must not end the network thread
        if settings.username is not None:
            password = settings.password.get_secret_value() if settings.password else None
            client.username_pw_set(settings.username, password)
        if self.companion is None:
            client.will_set(self.status_topic, b"offline", qos=1, retain=True)
        if settings.tls is not None:
            configure_tls(client, settings.tls)
        client.reconnect_delay_set(self._reconnect_min_s, max(self._reconnect_min_s, settings.reconnect_max_s))
        client.max_inflight_messages_set(0)  # the publisher keeps the window; paho must not queue behind it
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        client.on_subscribe = self._on_subscribe
        return client

    def set_ack_handler(self, handler: AckHandler | None) -> None:
        """Called from paho's thread with each message id the broker acknowledged (PUBACK/PUBCOMP)."""
        self._ack_handler = handler

    def add_connect_listener(self, listener: ConnectListener) -> None:
        """Be told of each new session at its very start, before anything can be published on it."""
        self._connect_listeners.append(listener)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, *, own_thread: bool = True) -> None:
        """Start connecting in the background; returns at once, an unreachable broker is retried.

        With `own_thread=False` no thread is started: the caller drives the network with `network_socket`,
        `read`, `write` and `tick` from its own loop, as a process simulating many boxes does.
        """
        if self._started:
            return
        self._started = True
        self._stopping = False
        self._own_thread = own_thread
        self._paho_logger.addFilter(self._paho_errors)
        self._aim(self.brokers.first())
        if own_thread:
            self._client.loop_start()
        else:
            self._next_attempt_at = 0.0

    @property
    def broker(self) -> BrokerAddress:
        """The node connected to, or being tried."""
        return self.brokers.current

    @property
    def broker_moves(self) -> int:
        """Connections to another node than the one before."""
        return self.brokers.moves

    def _aim(self, broker: BrokerAddress) -> None:
        """Make `broker` the node of paho's next connection attempt (paho reconnects to the last one aimed at)."""
        settings = self.settings
        if settings.protocol == "5":
            properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            properties.SessionExpiryInterval = 0 if self.companion else settings.session_expiry_s
            if self.window is not None:
                properties.ReceiveMaximum = self.window
            self._client.connect_async(
                broker.host,
                broker.port,
                keepalive=settings.keepalive_s,
                clean_start=self.companion is not None,
                properties=properties,
            )
        else:
            self._client.connect_async(broker.host, broker.port, keepalive=settings.keepalive_s)

    def _move_on(self) -> float:
        """The node in use or being tried is lost: aim at the next one, and set the jittered wait before it."""
        if (broker := self.brokers.advance()) is not None:
            self._aim(broker)
        delay = self._backoff.next_delay()
        self._client.reconnect_delay_set(delay, delay)  # type: ignore[arg-type]  # paho sleeps any real seconds
        self._next_attempt_at = time.monotonic() + delay
        return delay

    # -- driven by the caller (started with own_thread=False) --------------------------------------

    def network_socket(self) -> socket.socket | None:
        """The socket to watch for reading (and for writing while `wants_write`); None between connections."""
        sock = self._client.socket()
        return sock if isinstance(sock, socket.socket) else None

    @property
    def wants_write(self) -> bool:
        return self._client.want_write()

    def read(self) -> None:
        self._client.loop_read()

    def write(self) -> None:
        self._client.loop_write()

    def tick(self) -> None:
        """Call about once a second and after every read: keepalive, and connecting once the backoff allows."""
        if self._client.socket() is not None:
            self._client.loop_misc()
        elif self._started and not self._stopping and time.monotonic() >= self._next_attempt_at:
            try:
                self._client.reconnect()
            except OSError:
                self._on_connect_fail(self._client, None)

    def wait_connected(self, timeout: float) -> bool:
        return self._connected_event.wait(timeout)

    def wait_subscribed(self, timeout: float) -> bool:
        """True once connected with every subscription answered by the broker (see `subscriptions.refused`)."""
        return self.subscriptions.wait_confirmed(timeout)

    def stop(self, timeout: float = 2.0) -> None:
        """Say "offline" (retained) ourselves, since the broker sends no will after a clean disconnect."""
        if not self._started:
            return
        self._stopping = True
        if self.connected and self.companion is None:
            info = self._client.publish(self.status_topic, b"offline", qos=1, retain=True)
            if self._own_thread:
                wait_quietly(info, timeout)
            else:  # nobody else reads the acknowledgement: read it here (a broker may drop what a disconnect cuts)
                read_until_published(self._client, info, timeout)
        self._client.disconnect()
        if self._own_thread:
            self._client.loop_stop()
        self._paho_logger.removeFilter(self._paho_errors)
        self._started = False
        self.connected = False

    # -- traffic -----------------------------------------------------------------------------------

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int | None:
        """Hand a message to paho without blocking: its id, or None if it was not taken (not connected)."""
        if not self.connected:
            return None
        try:
            info = self._client.publish(topic, payload, qos=qos, retain=retain)
        except ValueError as err:
            raise ConfigError(f"cannot publish to MQTT topic {topic!r}: {err}") from err
        if info.rc == MQTTErrorCode.MQTT_ERR_SUCCESS:
            return info.mid
        if info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN and qos > 0:
            return info.mid  # the connection dropped just now: paho took it, and drops it at the next connect
        return None

    def subscribe(self, topic: str, qos: int, handler: MessageHandler) -> None:
        """Deliver messages on `topic` to `handler(topic, payload)`, also after every reconnect."""
        self.subscribe_requests(topic, qos, lambda topic, payload, _properties, _settle: handler(topic, payload))

    def subscribe_requests(self, topic: str, qos: int, handler: RequestHandler, share_group: str | None = None) -> None:
        """Deliver messages on `topic` with their MQTT 5 properties (None under 3.1.1) to `handler`.

        With `share_group` the broker gives each message to one member of the group. Such a message
        still carries its plain topic, so the callback is matched on `topic`, not on `$share/...`.
        """
        subscription = topic if share_group is None else shared(share_group, topic)
        self.subscriptions.want(subscription, qos)
        self._client.message_callback_add(topic, dispatcher(topic, handler, self._acks))
        if self.connected:
            self.subscriptions.send(self._client, subscription, qos)

    def unsubscribe(self, topic: str, share_group: str | None = None, timeout: float = 5.0) -> None:
        """Stop the broker sending on `topic`. Returns once it confirmed: what it sent before then has
        reached the handler (one connection keeps its order), and nothing arrives after."""
        subscription = topic if share_group is None else shared(share_group, topic)
        self.subscriptions.forget(subscription)
        if self.connected:
            confirmed = threading.Event()
            self._client.on_unsubscribe = lambda *_: confirmed.set()
            self._client.unsubscribe(subscription)
            confirmed.wait(timeout)

    @property
    def unsettled(self) -> int:
        """Requests received on a connection with a window and not yet answered or dropped."""
        return 0 if self._acks is None else self._acks.unsettled

    @property
    def quiet_s(self) -> float:
        """Seconds since a connection with a window last received a request (infinite if it never did)."""
        if self._acks is None or not self._acks.last_received:
            return float("inf")
        return time.monotonic() - self._acks.last_received

    def reply(self, topic: str, payload: bytes, correlation: bytes | None = None) -> bool:
        """Publish an answer at QoS 1, echoing the request's correlation data (MQTT 5); False if not connected.

        MQTT 5 answers name the box in the user property `served_by`: a request sent to a share group
        may be answered by any of its boxes.
        """
        properties = None
        if self.settings.protocol == "5":
            properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            properties.ContentType = "application/json"
            properties.UserProperty = [("served_by", self.device_id)]
            if correlation is not None:
                properties.CorrelationData = correlation
        if not self.connected:
            return False
        info = self._client.publish(topic, payload, qos=1, properties=properties)
        return info.rc == MQTTErrorCode.MQTT_ERR_SUCCESS

    # -- paho callbacks (paho's network thread) ------------------------------------------------------

    def _on_connect(
        self, client: Client, userdata: Any, flags: ConnectFlags, reason: ReasonCode, properties: Properties | None
    ) -> None:
        if reason.is_failure:
            refusal = f"broker {self.broker} refused the connection: {reason}"
            log.warning("MQTT: %s", refusal)
            self.last_error = refusal
            return
        client.drop_out_messages()  # the publisher re-sends from its spool, at its own pace
        if isinstance(sock := client.socket(), socket.socket):  # an answer must not wait for a delayed ACK
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._acks is not None:
            self._acks.new_session()
        self.receive_maximum = getattr(properties, "ReceiveMaximum", None)
        if self.companion is None:
            self.qos.connected(client, self.settings.protocol == "5", properties)
        self._backoff.reset()
        with self._lock:
            if self.connect_count:
                self.reconnects += 1
            self.brokers.connected()
            self.connect_count += 1
        for listener in self._connect_listeners:
            listener(self.connect_count)
        self.connected = True  # after connect_count: a reader that sees True also sees the new session
        self.last_error = self._paho_errors.last = ""
        if self.companion is None:
            client.publish(self.status_topic, b"online", qos=1, retain=True)
        self.subscriptions.session_started(client)
        self._connected_event.set()
        log.info(
            "MQTT: connected to %s as %s (session present: %s)", self.broker, self.client_id, flags.session_present
        )

    def _on_connect_fail(self, client: Client, userdata: Any) -> None:
        # paho calls this inside its `except OSError` block, so the cause is still at hand.
        error = sys.exc_info()[1]
        failure = describe_failure(error, str(self.broker), self.settings.tls)
        delay = self._move_on()
        log.warning("MQTT: %s; %s", failure, self.brokers.next_attempt(delay))
        self.last_error = failure  # after the log line: whoever sees the error can find it logged

    def _on_disconnect(
        self,
        client: Client,
        userdata: Any,
        flags: DisconnectFlags,
        reason: ReasonCode,
        properties: Properties | None,
    ) -> None:
        was_connected = self.connected
        self.connected = False
        self._connected_event.clear()
        self.subscriptions.session_ended()
        if self._stopping:
            return
        cause, self._paho_errors.last = self._paho_errors.last or str(reason), ""
        address = str(self.broker)
        delay = self._move_on()
        if was_connected:
            self.last_error = f"connection to {address} lost: {cause}"
        elif self.last_error.startswith(f"broker {address} refused"):
            return  # said already, with the broker's reason
        else:
            self.last_error = describe_early_close(cause, address, self.settings.tls)
        log.warning("MQTT: %s; %s", self.last_error, self.brokers.next_attempt(delay))

    def _on_subscribe(
        self, client: Client, userdata: Any, mid: int, reason_codes: list[ReasonCode], properties: Properties | None
    ) -> None:
        self.qos.subscribed(client, mid, reason_codes)
        self.subscriptions.answered(mid, reason_codes)

    def _on_publish(
        self, client: Client, userdata: Any, mid: int, reason: ReasonCode, properties: Properties | None
    ) -> None:
        handler = self._ack_handler
        if handler is not None:
            handler(mid, not reason.is_failure)
