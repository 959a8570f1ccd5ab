"""Operators' commands over MQTT: `<prefix>/<device_id>/command`, each answered on the reply topic it names.

The request/reply layer is `mqtt.replies`': MQTT 5 Response Topic and Correlation Data, or under MQTT
3.1.1 the envelope `{"reply_to": ..., "correlation_id": ..., "command": {...signed command...}}`. The
payload (or the envelope's `command`) is a signed command (see `signed`); anything else is refused with
an error reply and a log line, and counted. Commands run one at a time, in arrival order, on a thread
of their own: a rollout or a config apply must not interleave with another command, and paho's network
thread must never wait for one.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from edge_runtime import strict_json
from edge_runtime.config.control import ControlSettings
from edge_runtime.control.handlers import CommandFailed, ControlContext, run_command
from edge_runtime.control.signed import CommandRefused, NonceStore, verify_command
from edge_runtime.mqtt.acks import Settle
from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.replies import NoReplyTopic, read_request
from edge_runtime.mqtt.topics import Topics
from edge_runtime.package.signing import TrustedKey

__all__ = ["ControlChannel"]

log = logging.getLogger(__name__)

MAX_COMMAND_BYTES = 2 << 20  # a config apply carries the whole file


class ControlChannel:
    def __init__(
        self,
        connection: MqttConnection,
        topics: Topics,
        settings: ControlSettings,
        keys: list[TrustedKey],
        nonces: NonceStore,
        context: ControlContext,
    ) -> None:
        self.connection = connection
        self.topics = topics
        self.settings = settings
        self.keys = keys
        self.nonces = nonces
        self.context = context
        self.refused = 0
        self.done = 0
        self._lock = threading.Lock()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="command")

    def start(self) -> None:
        self.connection.subscribe_requests(self.topics.command, 1, self._received)
        log.info("taking signed commands on %s from %d operator keys", self.topics.command, len(self.keys))

    def stop(self) -> None:
        self._worker.shutdown(wait=True, cancel_futures=True)

    def figures(self) -> dict[str, int]:
        with self._lock:
            return {"commands_done": self.done, "commands_refused": self.refused}

    def _received(self, topic: str, payload: bytes, properties: Any, settle: Settle) -> None:
        try:
            self._worker.submit(self._handle, payload, properties, settle)
        except RuntimeError:  # stopping
            settle()

    def _handle(self, payload: bytes, properties: Any, settle: Settle) -> None:
        try:
            request = read_request(payload, properties, self.connection, settle, self.topics.prefix)
        except NoReplyTopic as why:
            settle()
            self._count(refused=True)
            log.warning("command on %s dropped: %s", self.topics.command, why)
            return
        reply = request.reply
        try:
            document = self._document(request.payload, request.envelope)
            command = verify_command(
                document, self.keys, self.topics.device_id, self.nonces,
                max_lifetime_s=self.settings.max_lifetime_s, max_clock_skew_s=self.settings.max_clock_skew_s,
            )  # fmt: skip
        except CommandRefused as refusal:
            self._count(refused=True)
            log.warning("%s (answered on %s)", refusal, reply.topic)
            reply.error(403 if refusal.kind != "busy" else 503, str(refusal))
            return
        log.info("command %r from key %s", command.name, command.key_id)
        try:
            result = run_command(self.context, command.name, command.args)
        except CommandFailed as failure:
            self._count(refused=False)
            answer: dict[str, Any] = {"error": failure.message, "code": failure.code, "command": command.name}
            if failure.details is not None:
                answer["details"] = failure.details
            log.warning("command %r failed: %s", command.name, failure.message)
            reply.answer(json.dumps(answer).encode())
            return
        except Exception as error:
            log.exception("command %r failed", command.name)
            reply.error(500, f"command {command.name!r} failed: {type(error).__name__}: {error}")
            return
        self._count(refused=False)
        reply.answer(json.dumps({"command": command.name, "result": result}).encode())

    def _document(self, payload: bytes, envelope: dict[str, Any] | None) -> Any:
        if envelope is not None:
            return envelope.get("command")
        if len(payload) > MAX_COMMAND_BYTES:
            raise CommandRefused(f"over {MAX_COMMAND_BYTES} bytes", "unsigned")
        try:
            return strict_json.loads(payload, "the command")
        except strict_json.JsonRefused as refused:
            raise CommandRefused(f"unsigned: {refused}", "unsigned") from None

    def _count(self, refused: bool) -> None:
        with self._lock:
            if refused:
                self.refused += 1
            else:
                self.done += 1
