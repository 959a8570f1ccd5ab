"""Requests over MQTT: `<prefix>/<device_id>/infer/<model>`, each answered on the reply topic it names.

With a share group, the box also takes requests sent to the whole fleet, `<prefix>/fleet/infer/<model>`,
through the shared subscription `$share/<group>/<prefix>/fleet/infer/+`: the broker hands each one to
one box of the group. Those arrive on a companion connection whose session ends with it, and each is
acknowledged only once answered, so the connection's in-flight window (the models' queue sizes
together) bounds what a box holds. When a box dies the requests it held are not answered, and the
client's own timeout is what tells; the broker gives later requests to the boxes still connected.
Every answer names the box that gave it: the MQTT 5 user property `served_by`, or a `served_by`
field in the envelope.

MQTT 5 clients name the reply topic in the request's Response Topic and tag it with Correlation Data,
which the answer echoes; the body is what the HTTP route takes (an Open Inference Protocol request in
JSON, or an image with Content Type image/jpeg or image/png). Brokers that speak only MQTT 3.1.1
(RabbitMQ before 3.13, NATS 2.9) carry no properties, so the same travels in an envelope:

    {"reply_to": "app/7/answers", "correlation_id": "42", "request": {...}}      tensors
    {"reply_to": "app/7/answers", "correlation_id": "42", "image": "<base64>"}   a JPEG or PNG

answered with `{"correlation_id": "42", "served_by": "<device id>", "response": {...}}`. Errors come
back the same way, as `{"error": "...", "code": 400}` (the HTTP status the same request would get),
never as silence; only a request that names no usable reply topic is counted and dropped, since there
is nowhere to answer.

A reply topic comes from the network and is checked before anything is published to it: no wildcards,
no `$` topics, nothing under the prefix (`<prefix>/` is the boxes' namespace: a request must not make a
box publish results or status in its own name or another box's, nor answer onto the fleet's request
topics, where the answer would come back as a request), and a bounded length.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from edge_runtime.mqtt.acks import Settle
from edge_runtime.mqtt.connection import MqttConnection, RequestHandler
from edge_runtime.mqtt.topics import Topics
from edge_runtime.serving.served import IMAGE_TYPES, Prepared, ServedModel, refusal

__all__ = ["MqttRequests"]

log = logging.getLogger(__name__)

MAX_REPLY_TOPIC = 512
MAX_WINDOW = 65535  # the largest MQTT 5 Receive Maximum


@dataclass(frozen=True)
class _Reply:
    topic: str
    correlation: bytes | None  # MQTT 5: echoed as a property
    envelope_id: str | None  # 3.1.1 envelope: echoed in the body
    enveloped: bool
    via: MqttConnection  # the connection the request came on
    settle: Settle


class _Malformed(Exception):  # noqa: N818 - a request to drop, with why
    pass


class MqttRequests:
    def __init__(
        self,
        connection: MqttConnection,
        topics: Topics,
        models: Mapping[str, ServedModel],
        workers: int = 2,
        share_group: str | None = None,
    ) -> None:
        self.connection = connection
        self.topics = topics
        self.models = models
        self.share_group = share_group
        self.fleet: MqttConnection | None = None  # the companion connection, with a share group
        self.dropped = 0  # requests with nowhere to answer
        self._lock = threading.Lock()
        self._workers = ThreadPoolExecutor(workers, thread_name_prefix="mqtt-infer")

    def start(self) -> None:
        self.connection.subscribe_requests(self.topics.infer("+"), 1, self._receiver(self.connection))
        if self.share_group is not None:
            window = min(MAX_WINDOW, max(1, sum(m.queue.batching.max_queue_size for m in self.models.values())))
            fleet = MqttConnection(self.connection.settings, self.topics.device_id, companion="fleet", window=window)
            fleet.subscribe_requests(self.topics.fleet_infer("+"), 1, self._receiver(fleet), self.share_group)
            fleet.start()
            self.fleet = fleet
            log.info("taking the fleet's requests on %s in share group %s, up to %d at once",
                     self.topics.fleet_infer("<model>"), self.share_group, window)  # fmt: skip

    def stop(self, timeout: float = 5.0) -> None:
        """Leave the share group first and answer what the box holds before disconnecting: a box stopped
        on purpose loses none of the fleet's requests, where one that dies loses what it held."""
        fleet = self.fleet
        if fleet is not None:
            fleet.unsubscribe(self.topics.fleet_infer("+"), self.share_group)
        self._workers.shutdown(wait=True)
        if fleet is not None:
            deadline = time.monotonic() + timeout
            while fleet.unsettled and time.monotonic() < deadline:
                time.sleep(0.01)
            fleet.stop()

    def _receiver(self, via: MqttConnection) -> RequestHandler:
        def received(topic: str, payload: bytes, properties: Any, settle: Settle) -> None:
            """paho's network thread: decoding and preprocessing happen on a worker, never here."""
            try:
                self._workers.submit(self._handle, via, topic, payload, properties, settle)
            except RuntimeError:  # the workers have stopped: the box is shutting down
                settle()
                log.warning("MQTT request on %s not taken: stopping", topic)

        return received

    def _handle(self, via: MqttConnection, topic: str, payload: bytes, properties: Any, settle: Settle) -> None:
        try:
            self._take(via, topic, payload, properties, settle)
        except Exception:
            settle()  # a request that failed unanswered must not keep its place in the in-flight window
            log.exception("MQTT request on %s failed", topic)

    def _take(self, via: MqttConnection, topic: str, payload: bytes, properties: Any, settle: Settle) -> None:
        try:
            reply, body, content_type = self._unwrap(payload, properties, via, settle)
        except _Malformed as why:
            settle()
            with self._lock:
                self.dropped += 1
            log.warning("MQTT request on %s dropped: %s", topic, why)
            return
        name = topic.rsplit("/", 1)[-1]
        model = self.models.get(name)
        if model is None:
            self._answer_error(reply, 404, f"unknown model {name!r}; served: {', '.join(self.models) or 'none'}")
            return
        try:
            prepared = model.prepare(body, content_type, None)

            def done(outputs: Any, error: BaseException | None) -> None:
                self._done(model, prepared, reply, outputs, error)

            model.queue.submit(prepared.inputs, done, prepared.timeout_ms)
        except Exception as error:
            model.metrics.request(ok=False)
            self._answer_error(reply, *refusal(model.name, error))

    def _done(
        self, model: ServedModel, prepared: Prepared, reply: _Reply, outputs: Any, error: BaseException | None
    ) -> None:
        if error is not None or outputs is None:
            model.metrics.request(ok=False)
            self._answer_error(reply, *refusal(model.name, error or RuntimeError("no outputs")))
            return
        try:
            body, _headers = model.respond(prepared, outputs)
        except Exception as failure:
            model.metrics.request(ok=False)
            self._answer_error(reply, *refusal(model.name, failure))
            return
        model.metrics.request(ok=True)
        if reply.enveloped:
            head = json.dumps({"correlation_id": reply.envelope_id, "served_by": self.topics.device_id})
            body = b'%s,"response":%s}' % (head[:-1].encode(), body)
        self._publish(reply, body)

    def _answer_error(self, reply: _Reply, code: int, message: str) -> None:
        answer: dict[str, Any] = {"error": message, "code": code}
        if reply.enveloped:
            answer = {"correlation_id": reply.envelope_id, "served_by": self.topics.device_id, **answer}
        self._publish(reply, json.dumps(answer).encode())

    def _publish(self, reply: _Reply, body: bytes) -> None:
        try:
            if not reply.via.reply(reply.topic, body, reply.correlation):
                log.warning("MQTT answer to %s lost: not connected to the broker", reply.topic)
        finally:
            reply.settle()

    def _unwrap(
        self, payload: bytes, properties: Any, via: MqttConnection, settle: Settle
    ) -> tuple[_Reply, bytes, str]:
        """Where to answer, the request body, and its content type; _Malformed when there is nowhere to answer."""
        response_topic = getattr(properties, "ResponseTopic", None)
        if response_topic:
            correlation = getattr(properties, "CorrelationData", None)
            content_type = str(getattr(properties, "ContentType", "") or "").split(";")[0].strip().lower()
            return _Reply(self._checked(response_topic), correlation, None, False, via, settle), payload, content_type
        try:
            envelope = json.loads(payload)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise _Malformed("no Response Topic, and the payload is no JSON envelope naming reply_to") from None
        if not isinstance(envelope, dict) or not isinstance(envelope.get("reply_to"), str):
            raise _Malformed("no Response Topic, and no reply_to in the payload")
        correlation_id = envelope.get("correlation_id")
        envelope_id = None if correlation_id is None else str(correlation_id)
        reply = _Reply(self._checked(envelope["reply_to"]), None, envelope_id, True, via, settle)
        if "image" in envelope:
            image = envelope["image"]
            try:
                return reply, base64.b64decode(image if isinstance(image, str) else "", validate=True), IMAGE_TYPES[0]
            except (binascii.Error, ValueError):
                return reply, b"", IMAGE_TYPES[0]  # answered: no image this server can decode
        return reply, json.dumps(envelope.get("request")).encode(), "application/json"

    def _checked(self, topic: str) -> str:
        if not topic or len(topic) > MAX_REPLY_TOPIC:
            raise _Malformed(f"reply topic of {len(topic)} characters (1 to {MAX_REPLY_TOPIC} allowed)")
        if "+" in topic or "#" in topic or "\0" in topic:
            raise _Malformed(f"reply topic {topic[:80]!r} holds a wildcard")
        if topic.startswith("$"):
            raise _Malformed(f"reply topic {topic[:80]!r} is reserved for the broker")
        prefix = self.topics.prefix
        if topic == prefix or topic.startswith(prefix + "/"):
            raise _Malformed(f"reply topic {topic[:80]!r} lies under {prefix}/, the boxes' own topics")
        return topic
