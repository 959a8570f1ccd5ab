"""Requests over MQTT: `<prefix>/<device_id>/infer/<model>`, each answered on the reply topic it names.

With a share group, the box also takes requests sent to the whole fleet, `<prefix>/fleet/infer/<model>`,
through the shared subscription `$share/<group>/<prefix>/fleet/infer/+`: the broker hands each one to
one box of the group. Those arrive on a companion connection whose session ends with it, and each is
acknowledged only once answered, so the connection's in-flight window (the models' queue sizes
together) bounds what a box holds. When a box dies the requests it held are not answered, and the
client's own timeout is what tells; the broker gives later requests to the boxes still connected.
Every answer names the box that gave it: the MQTT 5 user property `served_by`, or a `served_by`
field in the envelope.

How a request names its reply topic, and which reply topics are refused, is `mqtt.replies`'. The body
is what the HTTP route takes: an Open Inference Protocol request in JSON, or an image with Content Type
image/jpeg or image/png. Under MQTT 3.1.1 the envelope holds it:

    {"reply_to": "app/7/answers", "correlation_id": "42", "request": {...}}      tensors
    {"reply_to": "app/7/answers", "correlation_id": "42", "image": "<base64>"}   a JPEG or PNG

Errors come back as `{"error": "...", "code": 400}`, with the HTTP status the same request would get.
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
from typing import Any

from edge_runtime.mqtt.acks import Settle
from edge_runtime.mqtt.callbacks import RequestHandler
from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.replies import NoReplyTopic, Reply, Request, read_request
from edge_runtime.mqtt.topics import Topics
from edge_runtime.serving.batching import Place, QueueFull
from edge_runtime.serving.metrics import UnknownModelRequests
from edge_runtime.serving.protocol import IMAGE_TYPES
from edge_runtime.serving.served import Prepared, ServedModel, refusal

__all__ = ["MqttRequests"]

log = logging.getLogger(__name__)

MAX_WINDOW = 65535  # the largest MQTT 5 Receive Maximum
# A box leaving the share group disconnects once it has answered everything and the broker has handed it nothing
# for this long: requests the broker queued for it behind a full window still come after the unsubscription is
# confirmed, each as soon as an acknowledgement frees a place (a round trip on the broker's network).
LEAVING_QUIET_S = 0.5


class MqttRequests:
    def __init__(
        self,
        connection: MqttConnection,
        topics: Topics,
        models: Mapping[str, ServedModel],
        workers: int = 2,
        share_group: str | None = None,
        unknown: UnknownModelRequests | None = None,
    ) -> None:
        self.connection = connection
        self.topics = topics
        self.models = models
        self.unknown = unknown or UnknownModelRequests()
        self.share_group = share_group
        self.fleet: MqttConnection | None = None  # the companion connection, with a share group
        self.dropped = 0  # requests with nowhere to answer, or left unanswered by a fault
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
        on purpose loses none of the fleet's requests, where one that dies loses what it held.

        The broker confirming the unsubscription does not mean it has nothing more for this box: MQTT lets
        it still deliver what it had queued for the box's session (those beyond the in-flight window), and
        that queue is dropped with the session when the box disconnects. So the workers keep taking
        requests until the box holds none and none arrived for `LEAVING_QUIET_S`, or `timeout` passes."""
        fleet = self.fleet
        if fleet is not None:
            fleet.unsubscribe(self.topics.fleet_infer("+"), self.share_group)
            deadline = time.monotonic() + timeout
            while (fleet.unsettled or fleet.quiet_s < LEAVING_QUIET_S) and time.monotonic() < deadline:
                time.sleep(0.01)
            fleet.stop()
        self._workers.shutdown(wait=True)

    def _receiver(self, via: MqttConnection) -> RequestHandler:
        def received(topic: str, payload: bytes, properties: Any, settle: Settle) -> None:
            """paho's network thread: only the door is decided here (a place in the model's queue, else 503 at
            once); reading, decoding and preprocessing happen on a worker, so a burst queues no work."""
            model = self.models.get(topic.rsplit("/", 1)[-1])
            place: Place | None = None
            if model is not None:
                try:
                    place = model.queue.reserve()
                except (QueueFull, RuntimeError) as full:
                    self._refuse(via, topic, payload, properties, settle, model, full)
                    return
            try:
                self._workers.submit(self._handle, via, topic, payload, properties, settle, place)
            except RuntimeError:  # the workers have stopped: the box is shutting down
                if place is not None:
                    place.release()
                settle()
                log.warning("MQTT request on %s not taken: stopping", topic)

        return received

    def _refuse(
        self,
        via: MqttConnection,
        topic: str,
        payload: bytes,
        properties: Any,
        settle: Settle,
        model: ServedModel,
        error: Exception,
    ) -> None:
        """Answer a request the model's queue has no place for, from the network thread: reading its reply
        topic is all it costs."""
        model.metrics.request(ok=False)
        try:
            request = read_request(payload, properties, via, settle, self.topics.prefix)
        except NoReplyTopic:
            settle()
            with self._lock:
                self.dropped += 1
            return
        request.reply.error(503, f"{error}" if isinstance(error, QueueFull) else f"{error}; try again")

    def _handle(
        self, via: MqttConnection, topic: str, payload: bytes, properties: Any, settle: Settle, place: Place | None
    ) -> None:
        try:
            self._take(via, topic, payload, properties, settle, place)
        except Exception:
            settle()  # a request that failed unanswered must not keep its place in the in-flight window
            with self._lock:
                self.dropped += 1
            log.exception("MQTT request on %s failed unanswered", topic)  # a fault of this code: its traceback
        finally:
            if place is not None:
                place.release()  # a request that never reached the queue

    def _take(
        self, via: MqttConnection, topic: str, payload: bytes, properties: Any, settle: Settle, place: Place | None
    ) -> None:
        try:
            request = read_request(payload, properties, via, settle, self.topics.prefix)
        except NoReplyTopic as why:
            settle()
            with self._lock:
                self.dropped += 1
            log.warning("MQTT request on %s dropped: %s", topic, why)
            return
        reply = request.reply
        name = topic.rsplit("/", 1)[-1]
        model = self.models.get(name)
        if model is None:
            self.unknown.add(name, "MQTT")
            reply.error(404, f"unknown model {name!r}; served: {', '.join(self.models) or 'none'}")
            return
        if request.problem is not None:  # a 3.1.1 envelope too deep to read whole, or holding NaN
            model.metrics.request(ok=False)
            log.warning("MQTT request on %s refused: %s", topic, request.problem)
            reply.error(400, request.problem)
            return
        try:
            body, content_type = _body(request)
            prepared = model.prepare(body, content_type, None)

            def done(outputs: Any, error: BaseException | None) -> None:
                self._done(model, prepared, reply, outputs, error)

            model.queue.submit(prepared.inputs, done, prepared.timeout_ms, place=place)
        except Exception as error:
            model.metrics.request(ok=False)
            reply.error(*refusal(model.name, error))

    def _done(
        self, model: ServedModel, prepared: Prepared, reply: Reply, outputs: Any, error: BaseException | None
    ) -> None:
        if error is not None or outputs is None:
            model.metrics.request(ok=False)
            reply.error(*refusal(model.name, error or RuntimeError("no outputs")))
            return
        try:
            body, _headers = model.respond(prepared, outputs)
        except Exception as failure:
            model.metrics.request(ok=False)
            reply.error(*refusal(model.name, failure))
            return
        model.metrics.request(ok=True)
        reply.answer(body)


def _body(request: Request) -> tuple[bytes, str]:
    """The request body and its content type, from the message or from the 3.1.1 envelope."""
    envelope = request.envelope
    if envelope is None:
        return request.payload, request.content_type
    if "image" in envelope:
        image = envelope["image"]
        try:
            return base64.b64decode(image if isinstance(image, str) else "", validate=True), IMAGE_TYPES[0]
        except (binascii.Error, ValueError):
            return b"", IMAGE_TYPES[0]  # answered: no image this server can decode
    return json.dumps(envelope.get("request")).encode(), "application/json"
