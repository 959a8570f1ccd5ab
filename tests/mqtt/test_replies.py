"""Reading where a request wants its answer: MQTT 5 properties, the 3.1.1 envelope, and the refused topics."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.replies import NoReplyTopic, checked_reply_topic, read_request
from edge_runtime.mqtt.settings import MqttSettings

VIA = MqttConnection(MqttSettings(), "box-1")  # never started: it only names the box here


def settle() -> None:
    pass


def test_mqtt5_properties_name_the_reply_and_the_content_type() -> None:
    properties = SimpleNamespace(ResponseTopic="app/answers", CorrelationData=b"c-1", ContentType="Image/JPEG; q=1")
    request = read_request(b"\xff\xd8", properties, VIA, settle, "edge")
    assert (request.reply.topic, request.reply.correlation, request.reply.enveloped) == ("app/answers", b"c-1", False)
    assert request.content_type == "image/jpeg" and request.payload == b"\xff\xd8" and request.envelope is None
    assert request.reply.served_by == "box-1"


def test_the_311_envelope_names_the_reply_and_keeps_the_rest_for_the_caller() -> None:
    envelope = {"reply_to": "app/answers", "correlation_id": 42, "command": {"name": "status"}}
    request = read_request(json.dumps(envelope).encode(), None, VIA, settle, "edge")
    assert request.reply.enveloped and request.reply.envelope_id == "42" and request.reply.correlation is None
    assert request.envelope == envelope


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\xff\xfe", "no JSON envelope"),
        (b"[1, 2]", "no reply_to"),
        (json.dumps({"reply_to": 7}).encode(), "no reply_to"),
    ],
)
def test_a_request_with_nowhere_to_answer_is_refused(payload: bytes, why: str) -> None:
    with pytest.raises(NoReplyTopic, match=why):
        read_request(payload, None, VIA, settle, "edge")


@pytest.mark.parametrize(
    ("topic", "why"),
    [
        ("", "1 to 512 allowed"),
        ("a" * 513, "1 to 512 allowed"),
        ("app/+/x", "wildcard"),
        ("app/#", "wildcard"),
        ("app/\0", "wildcard"),
        ("$SYS/x", "reserved for the broker"),
        ("edge", "the boxes' own topics"),
        ("edge/box-2/status", "the boxes' own topics"),
        ("edge/fleet/infer/m", "the boxes' own topics"),
    ],
)
def test_refused_reply_topics(topic: str, why: str) -> None:
    with pytest.raises(NoReplyTopic, match=why):
        checked_reply_topic(topic, "edge")


def test_topics_beside_the_prefix_are_fine() -> None:
    assert checked_reply_topic("edgeapp/answers", "edge") == "edgeapp/answers"
    assert checked_reply_topic("app/edge/answers", "edge") == "app/edge/answers"
