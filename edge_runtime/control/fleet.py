"""The operator's side: find the boxes of a fleet on the broker, command them, and roll a release out in waves.

Boxes are found by their retained status (`<prefix>/<device_id>/status` = online). Each command is
signed for the one box it goes to (see `signed`), and its answer comes back on a reply topic of this
client's own, outside the prefix. A rollout starts on `canary` boxes first; only when every canary has
committed does it go on, in waves, and it stops as soon as the share of failed boxes passes
`max_failures` percent: a bad release stops where it was first seen failing, the rest of the fleet
never receives it. Progress is read from the boxes' retained rollout states. A box still mid-rollout
when its wave times out is sent `rollout abort`: left alone, it would go on and perhaps commit a
release the fleet run has already reported as failed there.
"""

from __future__ import annotations

import fnmatch
import json
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edge_runtime.control.signed import sign_command
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.signing import load_private_key

__all__ = ["BoxProgress", "FleetClient", "RolloutPlan", "new_rollout_id", "roll_out", "waves_of"]

FINAL = ("committed", "rolled_back")


@dataclass
class BoxProgress:
    device_id: str
    wave: int
    stage: str = "waiting"  # waiting, sent, a rollout stage, failed, not started
    release: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class RolloutPlan:
    command: str  # "rollout start" or "rollback"
    args: dict[str, Any]  # the command's args, without the rollout id
    canary: int = 1
    wave_size: int = 0  # 0: the rest in waves as large as the canary group times two, doubling
    max_failures: float = 0.0  # percent of the boxes started
    timeout_s: float = 900.0  # per wave


class FleetClient:
    def __init__(
        self, host: str, port: int, prefix: str, key: Path, *, username: str | None = None, password: str | None = None
    ) -> None:
        self.prefix = prefix
        self.key = key
        load_private_key(key)  # a missing or exposed key is said before anything is sent
        self.reply_topic = f"edge-runtime-fleet/{uuid.uuid4().hex}/answers"
        self.online: dict[str, bool] = {}
        self.states: dict[tuple[str, str], dict[str, Any]] = {}
        self.changed = threading.Condition()
        self._answers: dict[bytes, queue.Queue[dict[str, Any]]] = {}
        self._client = paho.Client(CallbackAPIVersion.VERSION2, protocol=MQTTProtocolVersion.MQTTv5)
        if username is not None:
            self._client.username_pw_set(username, password)
        self._client.on_message = self._message
        subscribed = threading.Event()
        self._client.on_subscribe = lambda *_: subscribed.set()
        try:
            self._client.connect(host, port)
        except OSError as error:
            raise EdgeRuntimeError(f"cannot reach the broker at {host}:{port}: {error}") from None
        self._client.loop_start()
        self._client.subscribe([(self.reply_topic, 1), (f"{prefix}/+/status", 1), (f"{prefix}/+/rollout/+", 1)])
        if not subscribed.wait(10):
            raise EdgeRuntimeError(f"the broker at {host}:{port} did not confirm the subscriptions")

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()

    def boxes(self, pattern: str = "*", settle_s: float = 1.0) -> list[str]:
        """Online boxes whose device id matches `pattern`, once the retained statuses had `settle_s` to arrive."""
        time.sleep(settle_s)
        with self.changed:
            return sorted(d for d, up in self.online.items() if up and fnmatch.fnmatchcase(d, pattern))

    def offline(self, pattern: str = "*") -> list[str]:
        """Boxes whose device id matches `pattern` and whose retained status says they are not online
        (call after `boxes`, which lets the statuses arrive)."""
        with self.changed:
            return sorted(d for d, up in self.online.items() if not up and fnmatch.fnmatchcase(d, pattern))

    def command(self, device_id: str, name: str, args: dict[str, Any] | None = None, timeout: float = 30) -> Any:
        """Send a signed command to one box and wait for its answer."""
        correlation = uuid.uuid4().bytes
        answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._answers[correlation] = answers
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.ResponseTopic = self.reply_topic
        properties.CorrelationData = correlation
        document = sign_command(self.key, device_id, name, args)
        self._client.publish(f"{self.prefix}/{device_id}/command", json.dumps(document), qos=1, properties=properties)
        try:
            return answers.get(timeout=timeout)
        except queue.Empty:
            raise EdgeRuntimeError(f"{device_id} did not answer {name!r} within {timeout:.0f} s") from None
        finally:
            self._answers.pop(correlation, None)

    def state(self, device_id: str, rollout_id: str) -> dict[str, Any] | None:
        with self.changed:
            return self.states.get((device_id, rollout_id))

    def _message(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        parts = message.topic.split("/")
        try:
            if message.topic == self.reply_topic:
                correlation = bytes(getattr(message.properties, "CorrelationData", b"") or b"")
                if correlation in self._answers:
                    self._answers[correlation].put(json.loads(message.payload))
                return
            device = parts[-2] if parts[-1] == "status" else parts[-3]
            with self.changed:
                if parts[-1] == "status":
                    self.online[device] = message.payload == b"online"
                else:
                    self.states[(device, parts[-1])] = json.loads(message.payload)
                self.changed.notify_all()
        except (ValueError, IndexError):
            return  # not ours to read


def new_rollout_id() -> str:
    return f"fleet-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def roll_out(
    client: FleetClient,
    boxes: list[str],
    plan: RolloutPlan,
    rollout_id: str,
    show: Callable[[list[BoxProgress]], None],
) -> list[BoxProgress]:
    """Run `plan` over `boxes`, canary first, as `rollout_id` on every box; returns every box's outcome."""
    waves = waves_of(boxes, plan)
    progress = [BoxProgress(device, index) for index, wave in enumerate(waves) for device in wave]
    by_device = {p.device_id: p for p in progress}
    for index, wave in enumerate(waves):
        for device in wave:
            _start(client, by_device[device], plan, rollout_id)
        show(progress)
        _wait_wave(client, [by_device[d] for d in wave], rollout_id, plan.timeout_s, lambda: show(progress))
        started = [p for p in progress if p.stage not in ("waiting", "not started")]
        failed = [p for p in started if p.stage != "committed"]
        canary_failed = index == 0 and failed
        if canary_failed or (started and 100 * len(failed) / len(started) > plan.max_failures):
            for rest in progress:
                if rest.stage == "waiting":
                    rest.stage, rest.reason = (
                        "not started",
                        "the rollout stopped: "
                        + ("a canary failed" if canary_failed else f"failures passed {plan.max_failures:g}%"),
                    )
            break
    show(progress)
    return progress


def waves_of(boxes: list[str], plan: RolloutPlan) -> list[list[str]]:
    canary = max(1, min(plan.canary, len(boxes)))
    waves, rest, size = [boxes[:canary]], boxes[canary:], plan.wave_size or 2 * canary
    while rest:
        waves.append(rest[:size])
        rest = rest[size:]
        size = plan.wave_size or 2 * size
    return waves


def _start(client: FleetClient, box: BoxProgress, plan: RolloutPlan, rollout_id: str) -> None:
    try:
        answer = client.command(box.device_id, plan.command, plan.args | {"rollout_id": rollout_id})
    except EdgeRuntimeError as error:
        box.stage, box.reason = "failed", str(error)
        return
    if "error" in answer:
        box.stage, box.reason = "failed", str(answer["error"])
    else:
        box.stage = "sent"


def _wait_wave(
    client: FleetClient, wave: list[BoxProgress], rollout_id: str, timeout_s: float, changed: Callable[[], None]
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        moved = False
        for box in wave:
            state = client.state(box.device_id, rollout_id)
            if box.stage in ("failed", *FINAL) or state is None:
                continue
            if state["stage"] != box.stage:
                box.stage, box.release, box.reason = state["stage"], state.get("release"), state.get("reason", "")
                moved = True
        if moved:
            changed()
        pending = [box for box in wave if box.stage not in ("failed", *FINAL)]
        if not pending:
            return
        if time.monotonic() > deadline:
            for box in pending:
                late = f"no final state within {timeout_s:g} s (last: {box.stage})"
                box.stage, box.reason = "failed", f"{late}; {_abort(client, box.device_id, rollout_id)}"
            return
        with client.changed:
            client.changed.wait(0.5)


def _abort(client: FleetClient, device_id: str, rollout_id: str) -> str:
    """Send `rollout abort` to a box a wave left behind; what came of it, for the box's reason."""
    try:
        answer = client.command(device_id, "rollout abort", {"rollout_id": rollout_id})
    except EdgeRuntimeError as error:
        return f"rollout abort not answered: {error}"
    if "error" in answer:
        return f"rollout abort refused: {answer['error']}"
    return "rollout abort sent: the box rolls back"
