"""Request and reply over MQTT, for anything a box answers: inference requests, operators' commands.

MQTT 5 clients name the reply topic in the request's Response Topic and tag it with Correlation Data,
which the answer echoes as a property. Brokers that speak only MQTT 3.1.1 (RabbitMQ before 3.13,
NATS 2.9) carry no properties, so the same travels in a JSON envelope,

    {"reply_to": "app/7/answers", "correlation_id": "42", ...what the request holds...}

answered with `{"correlation_id": "42", "served_by": "<device id>", ...}`. Errors come back the same
way, `{"error": "...", "code": 400}`, never as silence; a request that names no usable reply topic
raises `NoReplyTopic`, for the caller to count and drop, since there is nowhere to answer. The envelope
is read as `strict_json` reads network JSON; one it refuses (nested too deep, or holding NaN) whose top
level still names a reply topic comes with its `problem`, for the caller to answer with a 400.

A reply topic comes from the network and is checked before anything is published to it: no wildcards,
no `$` topics, nothing under the prefix (`<prefix>/` is the boxes' namespace: a request must not make a
box publish results or status in its own name or another box's, nor answer onto a request topic, where
the answer would come back as a request), and a bounded length.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from edge_runtime import strict_json
from edge_runtime.mqtt.acks import Settle
from edge_runtime.mqtt.connection import MqttConnection

__all__ = ["MAX_REPLY_TOPIC", "NoReplyTopic", "Reply", "Request", "read_request"]

log = logging.getLogger(__name__)

MAX_REPLY_TOPIC = 512


class NoReplyTopic(Exception):  # noqa: N818 - a request to drop, with why
    pass


@dataclass(frozen=True)
class Reply:
    """Where and how one request is answered; `settle` acknowledges the request once the answer is out."""

    topic: str
    correlation: bytes | None  # MQTT 5: echoed as a property
    envelope_id: str | None  # 3.1.1 envelope: echoed in the body
    enveloped: bool
    via: MqttConnection  # the connection the request came on, and the answer leaves on
    settle: Settle
    served_by: str

    def answer(self, body: bytes) -> None:
        """Publish `body` (a JSON object): as it is under MQTT 5, inside the envelope's answer under 3.1.1."""
        if self.enveloped:
            head = json.dumps({"correlation_id": self.envelope_id, "served_by": self.served_by})
            body = b'%s,"response":%s}' % (head[:-1].encode(), body)
        self._publish(body)

    def error(self, code: int, message: str) -> None:
        answer: dict[str, Any] = {"error": message, "code": code}
        if self.enveloped:
            answer = {"correlation_id": self.envelope_id, "served_by": self.served_by, **answer}
        self._publish(json.dumps(answer).encode())

    def _publish(self, body: bytes) -> None:
        try:
            if not self.via.reply(self.topic, body, self.correlation):
                log.warning("MQTT answer to %s lost: not connected to the broker", self.topic)
        finally:
            self.settle()


@dataclass(frozen=True)
class Request:
    reply: Reply
    payload: bytes  # MQTT 5: the message's payload; 3.1.1: empty, the envelope holds the request
    content_type: str  # MQTT 5's Content Type, lower case, without parameters
    envelope: dict[str, Any] | None  # 3.1.1: the envelope, for the caller to take its own fields from
    problem: str | None = None  # 3.1.1: why the envelope could not be read whole (its nested fields are None)


def read_request(payload: bytes, properties: Any, via: MqttConnection, settle: Settle, prefix: str) -> Request:
    """Where to answer the request, and what it holds; NoReplyTopic when there is nowhere to answer."""
    served_by = via.device_id
    response_topic = getattr(properties, "ResponseTopic", None)
    if response_topic:
        correlation = getattr(properties, "CorrelationData", None)
        content_type = str(getattr(properties, "ContentType", "") or "").split(";")[0].strip().lower()
        reply = Reply(checked_reply_topic(response_topic, prefix), correlation, None, False, via, settle, served_by)
        return Request(reply, payload, content_type, None)
    problem = None
    try:
        envelope = strict_json.loads(payload, "the envelope")
    except strict_json.JsonRefused as refused:
        try:  # its top level may still say where to answer that
            envelope = strict_json.top_level(payload, "the envelope")
        except strict_json.JsonRefused:
            why = f"no Response Topic, and the payload is no JSON envelope naming reply_to: {refused}"
            raise NoReplyTopic(why) from None
        problem = str(refused)
    if not isinstance(envelope, dict) or not isinstance(envelope.get("reply_to"), str):
        raise NoReplyTopic("no Response Topic, and no reply_to in the payload")
    correlation_id = envelope.get("correlation_id")
    envelope_id = None if correlation_id is None else str(correlation_id)
    reply = Reply(checked_reply_topic(envelope["reply_to"], prefix), None, envelope_id, True, via, settle, served_by)
    return Request(reply, b"", "application/json", envelope, problem)


def checked_reply_topic(topic: str, prefix: str) -> str:
    if not topic or len(topic) > MAX_REPLY_TOPIC:
        raise NoReplyTopic(f"reply topic of {len(topic)} characters (1 to {MAX_REPLY_TOPIC} allowed)")
    if "+" in topic or "#" in topic or "\0" in topic:
        raise NoReplyTopic(f"reply topic {topic[:80]!r} holds a wildcard")
    if topic.startswith("$"):
        raise NoReplyTopic(f"reply topic {topic[:80]!r} is reserved for the broker")
    if topic == prefix or topic.startswith(prefix + "/"):
        raise NoReplyTopic(f"reply topic {topic[:80]!r} lies under {prefix}/, the boxes' own topics")
    return topic
