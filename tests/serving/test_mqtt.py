"""Requests over MQTT against a real Mosquitto: MQTT 5 properties, the 3.1.1 envelope, and every refusal."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as paho
import pytest
from broker import Mosquitto
from image_bombs import png_declaring
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from waiting import wait_for

from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.settings import MqttSettings
from edge_runtime.mqtt.topics import Topics
from edge_runtime.serving.service import Serving

StartServing = Callable[..., Serving]
TOPICS = Topics("edge", "test-box")
PHOTO = Path(__file__).resolve().parents[2] / "samples/images/astronaut.jpg"


class Client:
    """An application on the broker: sends requests, collects what arrives on its reply topic."""

    def __init__(self, broker: Mosquitto, protocol: MQTTProtocolVersion, reply_topic: str = "app/answers") -> None:
        self.answers: queue.Queue[tuple[bytes, Any]] = queue.Queue()
        self.protocol = protocol
        self._client = paho.Client(CallbackAPIVersion.VERSION2, protocol=protocol)
        subscribed = threading.Event()
        self._client.on_subscribe = lambda *_: subscribed.set()
        self._client.on_message = lambda _c, _u, m: self.answers.put((bytes(m.payload), getattr(m, "properties", None)))
        self._client.connect(broker.host, broker.port)
        self._client.loop_start()
        self._client.subscribe(reply_topic, 1)
        assert subscribed.wait(5)

    def send(self, model: str, payload: bytes, **properties: Any) -> None:
        self.send_to(TOPICS.infer(model), payload, **properties)

    def send_to(self, topic: str, payload: bytes, **properties: Any) -> None:
        props = None
        if properties:
            props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            for name, value in properties.items():
                setattr(props, name, value)
        self._client.publish(topic, payload, qos=1, properties=props).wait_for_publish(5)

    def answer(self, timeout: float = 20.0) -> tuple[dict[str, Any], Any]:
        payload, properties = self.answers.get(timeout=timeout)
        return json.loads(payload), properties

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


@pytest.fixture
def connection(mosquitto: Mosquitto) -> Iterator[MqttConnection]:
    connection = MqttConnection(MqttSettings(host=mosquitto.host, port=mosquitto.port), TOPICS.device_id)
    connection.start()
    assert connection.wait_connected(10)
    yield connection
    connection.stop()


@pytest.fixture
def served(
    mosquitto: Mosquitto,
    start_serving: StartServing,
    batch_classifier: Path,
    face_package: Path,
    connection: MqttConnection,
) -> Serving:
    models = [{"name": "classifier", "path": str(batch_classifier)}, {"name": "faces", "path": str(face_package)}]
    serving = start_serving(models, connection=connection, topics=TOPICS, enabled=False)
    wait_answering(mosquitto)
    return serving


def wait_answering(broker: Mosquitto) -> None:
    """Until the broker has the box's subscription: a request published before it would reach nobody."""
    probe = Client(broker, MQTTProtocolVersion.MQTTv5, reply_topic="app/probe")
    try:
        for _ in range(40):
            probe.send("probe", b"{}", ResponseTopic="app/probe")
            try:
                probe.answer(timeout=0.25)
                return
            except queue.Empty:
                continue
        raise AssertionError("the box never answered on its request topic")
    finally:
        probe.close()


@pytest.fixture
def mqtt5(mosquitto: Mosquitto, served: Serving) -> Iterator[Client]:
    client = Client(mosquitto, MQTTProtocolVersion.MQTTv5)
    yield client
    client.close()


def tensor_request(samples: np.ndarray) -> dict[str, Any]:
    return {
        "inputs": [
            {"name": "image", "shape": list(samples.shape), "datatype": "FP32", "data": samples.ravel().tolist()}
        ]
    }


def test_an_mqtt5_request_is_answered_on_its_response_topic_with_its_correlation_data(
    served: Serving, mqtt5: Client
) -> None:
    samples = np.random.default_rng(0).normal(0, 1, (2, 3, 32, 32)).astype(np.float32)
    mqtt5.send("classifier", json.dumps(tensor_request(samples)).encode(), ResponseTopic="app/answers",
               CorrelationData=b"\x00req-7")  # fmt: skip
    answer, properties = mqtt5.answer()
    assert properties.CorrelationData == b"\x00req-7"
    assert properties.UserProperty == [("served_by", "test-box")]
    (output,) = answer["outputs"]
    assert output["name"] == "probabilities" and output["shape"] == [2, 10]
    direct = served.models["classifier"].model.infer([samples])[0]
    np.testing.assert_allclose(np.asarray(output["data"], np.float32).reshape(2, 10), direct, rtol=1e-5, atol=1e-6)


def test_an_image_over_mqtt5_is_answered_with_the_result_message(served: Serving, mqtt5: Client) -> None:
    mqtt5.send("faces", PHOTO.read_bytes(), ResponseTopic="app/answers", CorrelationData=b"1", ContentType="image/jpeg")
    message, properties = mqtt5.answer()
    assert properties.CorrelationData == b"1"
    assert message["task"] == "detection" and [d["label"] for d in message["result"]["detections"]] == ["face"]


def test_an_image_declaring_too_many_pixels_is_answered_413_over_mqtt(served: Serving, mqtt5: Client) -> None:
    mqtt5.send("faces", png_declaring(30000, 30000), ResponseTopic="app/answers", CorrelationData=b"bomb",
               ContentType="image/png")  # fmt: skip
    answer, properties = mqtt5.answer()
    assert properties.CorrelationData == b"bomb"
    assert answer["code"] == 413 and "declares 30000×30000 pixels" in answer["error"], answer


def test_a_request_finding_no_place_in_the_queue_is_refused_before_any_work(served: Serving, mqtt5: Client) -> None:
    """Every place of the model's queue is held: the request is answered 503 from the network thread, and
    is never read, decoded or prepared (a burst queues no work on the box)."""
    model = served.models["faces"]
    held = [model.queue.reserve() for _ in range(model.queue.batching.max_queue_size)]
    try:
        prepared_before = model.metrics.prepare_ms
        mqtt5.send("faces", PHOTO.read_bytes(), ResponseTopic="app/answers", CorrelationData=b"full",
                   ContentType="image/jpeg")  # fmt: skip
        answer, properties = mqtt5.answer()
        assert properties.CorrelationData == b"full"
        assert answer["code"] == 503 and "requests already wait" in answer["error"], answer
        assert model.metrics.prepare_ms == prepared_before
    finally:
        for place in held:
            place.release()
    mqtt5.send(
        "faces", PHOTO.read_bytes(), ResponseTopic="app/answers", CorrelationData=b"room", ContentType="image/jpeg"
    )
    answer, properties = mqtt5.answer()
    assert properties.CorrelationData == b"room" and answer["task"] == "detection", answer


def test_mqtt311_requests_travel_in_an_envelope(mosquitto: Mosquitto, served: Serving) -> None:
    client = Client(mosquitto, MQTTProtocolVersion.MQTTv311)
    try:
        photo = base64.b64encode(PHOTO.read_bytes()).decode()
        client.send("faces", json.dumps({"reply_to": "app/answers", "correlation_id": "abc", "image": photo}).encode())
        answer, _ = client.answer()
        assert answer["correlation_id"] == "abc" and answer["served_by"] == "test-box"
        assert [d["label"] for d in answer["response"]["result"]["detections"]] == ["face"]
        samples = np.zeros((1, 3, 32, 32), np.float32)
        envelope = {"reply_to": "app/answers", "correlation_id": 5, "request": tensor_request(samples)}
        client.send("classifier", json.dumps(envelope).encode())
        answer, _ = client.answer()
        assert answer["correlation_id"] == "5" and answer["response"]["outputs"][0]["shape"] == [1, 10]
        unknown_before = served.unknown_models.count
        client.send("nothing", json.dumps({"reply_to": "app/answers", "correlation_id": "x", "request": {}}).encode())
        answer, _ = client.answer()
        assert served.unknown_models.count == unknown_before + 1
        assert answer == {
            "correlation_id": "x",
            "served_by": "test-box",
            "error": "unknown model 'nothing'; served: classifier, faces",
            "code": 404,
        }
    finally:
        client.close()


@pytest.mark.parametrize(
    ("model", "payload", "code", "error"),
    [
        ("nothing", b"{}", 404, "unknown model 'nothing'"),
        ("classifier", b"{not json", 400, "the request is not valid JSON at line 1"),
        ("classifier", json.dumps(tensor_request(np.zeros((1, 3, 8, 8), np.float32))).encode(), 400,
         "input 'image': shape [1, 3, 8, 8], but the model takes [-1, 3, 32, 32]"),
        ("faces", b"not a picture", 400, "no JPEG, PNG, BMP or WebP image"),
        ("classifier", b"[" * 100_000, 400, "the request is nested deeper than 64 levels of arrays and objects"),
        ("classifier", b'{"inputs": [{"name": "image", "shape": [1], "datatype": "FP32", "data": [NaN]}]}', 400,
         "the request holds NaN, which is no JSON number"),
    ],
)  # fmt: skip
def test_a_bad_request_with_a_reply_topic_is_answered_with_the_error(
    served: Serving, mqtt5: Client, model: str, payload: bytes, code: int, error: str
) -> None:
    content_type = "image/png" if model == "faces" else "application/json"
    mqtt5.send(model, payload, ResponseTopic="app/answers", CorrelationData=b"c", ContentType=content_type)
    answer, properties = mqtt5.answer()
    assert answer["code"] == code and error in answer["error"] and properties.CorrelationData == b"c"


def test_an_image_sent_without_its_content_type_is_told_which_to_give(served: Serving, mqtt5: Client) -> None:
    mqtt5.send("faces", PHOTO.read_bytes(), ResponseTopic="app/answers", CorrelationData=b"no-type")
    answer, _ = mqtt5.answer()
    assert answer["code"] == 400
    assert answer["error"] == (
        "the request is not valid JSON: not UTF-8 text (an image needs the content type image/jpeg or image/png)"
    )


def test_mqtt311_envelopes_nested_too_deep_or_with_nan_are_answered_400_counted_and_logged_without_a_traceback(
    mosquitto: Mosquitto, served: Serving, caplog: pytest.LogCaptureFixture
) -> None:
    """100,000 nested `[` in a 3.1.1 envelope got no answer, a traceback in the log, and no count."""
    caplog.set_level(logging.INFO)
    client = Client(mosquitto, MQTTProtocolVersion.MQTTv311)
    try:
        nested = b"[" * 100_000 + b"]" * 100_000
        client.send("classifier", b'{"reply_to": "app/answers", "correlation_id": "deep", "request": %s}' % nested)
        answer, _ = client.answer()
        assert answer["correlation_id"] == "deep" and answer["code"] == 400
        assert answer["error"].startswith("the envelope is nested deeper than 64 levels of arrays and objects")
        request = b'{"inputs": [{"name": "image", "shape": [1], "datatype": "FP32", "data": [Infinity]}]}'
        client.send("classifier", b'{"reply_to": "app/answers", "correlation_id": "inf", "request": %s}' % request)
        answer, _ = client.answer()
        assert answer["correlation_id"] == "inf" and answer["code"] == 400
        assert answer["error"] == "the envelope holds Infinity, which is no JSON number: JSON has finite numbers only"
        client.send("classifier", b'{"reply_to": "app/answers", "request": ' + b"[" * 100_000)  # no top level to read
        assert wait_for(lambda: served.mqtt is not None and served.mqtt.dropped == 1, timeout=10)
    finally:
        client.close()
    assert served.report()["classifier"]["request_failure"] == 2
    assert [record.getMessage() for record in caplog.records if record.exc_info] == []
    refused = [r.getMessage() for r in caplog.records if r.name == "edge_runtime.serving.mqtt"]
    assert len(refused) == 3 and all(message.startswith("MQTT request on edge/test-box/infer/classifier ")
                                     for message in refused), refused  # fmt: skip


@pytest.mark.parametrize(
    "reply_to",
    [
        "app/+/answers",
        "app/#",
        "$SYS/broker",
        "$share/g/app/answers",
        "edge/test-box/faces/result",
        "edge/test-box/status",
        "edge/other-box/status",
        "edge/fleet/infer/classifier",
        "edge",
        "x" * 600,
        "",
    ],
)
def test_a_request_with_no_usable_reply_topic_is_counted_and_dropped(
    mosquitto: Mosquitto, served: Serving, reply_to: str
) -> None:
    watcher = mosquitto.subscribe_collect("#")
    client = Client(mosquitto, MQTTProtocolVersion.MQTTv311)
    try:
        client.send("classifier", json.dumps({"reply_to": reply_to, "request": {}}).encode())
        client.send("classifier", b"\xff\xfe garbage")  # no envelope at all
        assert served.mqtt is not None
        assert wait_for(lambda: served.mqtt is not None and served.mqtt.dropped == 2, timeout=10)
        assert watcher.wait_until(lambda messages: len([m for m in messages if "garbage" in str(m.payload)]) == 1)
        published = {m.topic for m in watcher.messages if not m.retain}
        assert published <= {TOPICS.infer("classifier")}  # nothing answered, anywhere
    finally:
        client.close()
        watcher.close()


def test_a_box_leaving_its_share_group_answers_what_the_broker_still_hands_it(
    mosquitto: Mosquitto, start_serving: StartServing, batch_classifier: Path, connection: MqttConnection
) -> None:
    """With a queue of one, the box's in-flight window is one request: the broker queues the rest for the box's
    session and hands them over one by one as answers free the window, also after it confirmed the box's
    unsubscription. A box stopped on purpose answers every one before it disconnects."""
    models = [{"name": "classifier", "path": str(batch_classifier), "batching": {"max_queue_size": 1}}]
    serving = start_serving(models, connection=connection, topics=TOPICS, enabled=False, share_group="workers")
    client = Client(mosquitto, MQTTProtocolVersion.MQTTv5)
    try:
        for attempt in range(40):  # until the broker has the box in the group
            client.send_to(TOPICS.fleet_infer("classifier"), b"{}", ResponseTopic="app/answers",
                           CorrelationData=f"probe-{attempt}".encode())  # fmt: skip
            with contextlib.suppress(queue.Empty):
                client.answer(timeout=0.25)
                break
        else:
            raise AssertionError("the box never answered on the fleet's request topic")
        samples = np.zeros((1, 3, 32, 32), np.float32)
        request = json.dumps(tensor_request(samples)).encode()
        for index in range(8):
            client.send_to(TOPICS.fleet_infer("classifier"), request, ResponseTopic="app/answers",
                           CorrelationData=str(index).encode())  # fmt: skip
        serving.stop()
        numbered = [str(index) for index in range(8)]
        answered: dict[str, dict[str, Any]] = {}
        with contextlib.suppress(queue.Empty):
            while not set(numbered) <= answered.keys():
                answer, properties = client.answer(timeout=5)
                answered[properties.CorrelationData.decode()] = answer
        assert [key for key in numbered if "outputs" not in answered.get(key, {})] == [], answered
    finally:
        client.close()
