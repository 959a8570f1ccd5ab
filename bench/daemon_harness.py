"""What `daemon_pipeline.py` builds around the pipeline it measures, as the daemon builds it.

Sources that hand out one decoded frame (as fast as read, or one per opening of a gate), sinks and
subscribers that count or time results, the daemon's broker connection with publish times noted, and
the per-thread CPU accounting that splits a result's cost by role.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import paho.mqtt.client as paho
from broker import Mosquitto
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.base import Decoder
from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.publisher import Publisher
from edge_runtime.mqtt.settings import MqttSettings
from edge_runtime.mqtt.spool import Spool
from edge_runtime.mqtt.topics import Topics
from edge_runtime.package.loader import open_package
from edge_runtime.pipeline.objects import ObjectListener, ZonesOf
from edge_runtime.pipeline.outputs import PublishPolicy
from edge_runtime.pipeline.streaming import Pipeline
from edge_runtime.placement.model import LoadedModel, load_model
from edge_runtime.sources.base import EndOfSource, Frame, Source, SourceConfig
from edge_runtime.tracking import TrackConfig

VARIANT = "openvino/fp32"
DEVICE_ID = "bench-box"
RESULTS = "edge/+/+/result"
CORES = len(os.sched_getaffinity(0))
_INDEX = re.compile(rb'"index":(\d+)')
ROLES = {
    "feed": "feed",
    "openvino-done": "completion",
    "post": "post",
    "mqtt-publisher": "publisher",
    "paho": "paho",
    "mqtt-spool": "spool flush",
}


class StillFrames(Source):
    """The same decoded frame, as fast as it is read; with a gate, one frame per opening of the gate."""

    types = ("still",)

    def __init__(self, image: np.ndarray, gate: threading.Event | None = None) -> None:
        super().__init__(SourceConfig(), "still")
        self.image = image
        self.gate = gate
        self.captured_at: dict[int, float] = {}
        self._closed = False

    def start(self) -> None:
        self.stats.connected = True

    def read(self, timeout: float) -> Frame | None:
        if self.gate is not None:
            if not self.gate.wait(timeout):
                return None
            self.gate.clear()
        if self._closed:
            raise EndOfSource
        index = self.stats.delivered
        self.stats.delivered += 1
        return self.frame(index)

    def frame(self, index: int) -> Frame:
        """The `index`-th frame read, captured now."""
        self.captured_at[index] = now = time.time()
        return Frame(self.image, index, now, self.name)

    def close(self) -> None:
        self._closed = True
        if self.gate is not None:
            self.gate.set()


class DroppedResults:
    """A sink that counts results and sends them nowhere: the pipeline without its publish path."""

    def __init__(self) -> None:
        self.count = 0

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        self.count += 1


class CountingSubscriber:
    """`mosquitto_sub` in its own process, one line per message, so receiving costs the pipeline no GIL."""

    def __init__(self, broker: Mosquitto, directory: Path, topic: str = RESULTS) -> None:
        self.path = directory / "arrivals.txt"
        command = [shutil.which("mosquitto_sub") or "mosquitto_sub", "-h", broker.host, "-p", str(broker.control_port)]
        with self.path.open("wb") as out:
            self.process = subprocess.Popen([*command, "-t", topic, "-q", "1", "-F", "%l"], stdout=out)
        time.sleep(0.3)  # subscribed before anything is published

    def count(self) -> int:
        return self.path.read_bytes().count(b"\n")

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(5)


class Arrivals:
    """An in-process subscriber timing each result from capture to arrival; it opens the source's gate."""

    def __init__(self, broker: Mosquitto) -> None:
        self.gate = threading.Event()
        self.source: StillFrames | None = None
        self.to_arrival_ms: list[float] = []
        self.total_ms: list[float] = []
        self._client = paho.Client(CallbackAPIVersion.VERSION2, protocol=MQTTProtocolVersion.MQTTv5)
        self._client.on_message = self._on_message
        self._client.connect(broker.host, broker.control_port)
        self._client.subscribe(RESULTS, 1)
        self._client.loop_start()
        time.sleep(0.3)

    def _on_message(self, _client: paho.Client, _userdata: object, message: paho.MQTTMessage) -> None:
        arrived = time.time()
        result = json.loads(message.payload)
        if self.source is not None:
            self.to_arrival_ms.append((arrived - self.source.captured_at[result["index"]]) * 1000)
            self.total_ms.append(result["latency_ms"]["total"])
        self.gate.set()

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


class TimedConnection(MqttConnection):
    """The daemon's broker connection, noting when each result is published (handed to paho), while asked to."""

    def __init__(self, settings: MqttSettings, client_id: str) -> None:
        super().__init__(settings, client_id)
        self.recording = False
        self.published_at: dict[int, float] = {}  # result index -> wall-clock time it was handed to paho
        self.results_handed = 0  # result messages handed to paho, not events, crossings or states

    def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int | None:
        handed = super().publish(topic, payload, qos, retain)
        if handed is not None and topic.endswith("/result"):
            self.results_handed += 1
        if self.recording and handed is not None and (index := _INDEX.search(payload)) is not None:
            self.published_at[int(index.group(1))] = time.time()
        return handed


class Daemon:
    """What the daemon builds around its pipelines: one broker connection, one spool, one publisher."""

    def __init__(self, broker: Mosquitto, directory: Path, subscriber_pid: int) -> None:
        self.broker = broker
        process = broker._process  # the helper keeps its Popen private; its CPU time is part of the cost
        assert process is not None
        self.processes = {"broker": process.pid, "subscriber": subscriber_pid}
        settings = MqttSettings(host=broker.host, port=broker.port)
        self.connection = TimedConnection(settings, DEVICE_ID)
        self.spool = Spool(directory / "spool.sqlite")
        self.publisher = Publisher(self.connection, self.spool, settings.spool)
        self.publisher.start()
        self.connection.start()
        if not self.connection.wait_connected(5):
            raise SystemExit(f"no connection to the broker: {self.connection.last_error}")

    @property
    def acked(self) -> int:
        return self.publisher.stats().acked

    def run(
        self,
        model: LoadedModel,
        source: Source,
        track: TrackConfig | None = None,
        listeners: Sequence[ObjectListener] = (),
        zones_of: ZonesOf | None = None,
    ) -> Pipeline:
        """A started pipeline publishing through this daemon's publisher; with `track`, following objects."""
        pipeline = Pipeline(
            name="bench",
            topics=Topics("edge", DEVICE_ID),
            source=source,
            model=model,
            decoder=decoder_for(model),
            input_spec=model.input_specs[0],
            policy=PublishPolicy(qos=1),
            sink=self.publisher,
            track=track,
            object_listeners=listeners,
            zones_of=zones_of,
        )
        pipeline.start()
        return pipeline

    def finish(self, pipeline: Pipeline) -> None:
        pipeline.stop()
        if not self.publisher.drain(60):
            raise SystemExit(f"the spool did not drain: {self.publisher.stats()}")
        if pipeline.stats.errors:
            raise SystemExit(f"the pipeline counted {pipeline.stats.errors} errors")

    def close(self) -> None:
        self.publisher.close()
        self.connection.stop()
        self.spool.close()


def alternate(rounds: int, *sides: Callable[[], float]) -> list[list[float]]:
    """Each side once per round, in turn, so that drift of the machine reaches every side alike; every other
    round in the reverse order, so that no side always follows the same one."""
    values: list[list[float]] = [[] for _ in sides]
    for index in range(rounds):
        order = range(len(sides)) if index % 2 == 0 else reversed(range(len(sides)))
        for position in order:
            values[position].append(sides[position]())
        print(f"  round {index + 1}: " + ", ".join(f"{v[-1]:.3f}" for v in values), file=sys.stderr)
    return values


def load(package_dir: Path, hint: str) -> LoadedModel:
    """The package's OpenVINO IR on OpenVINO CPU at fp32, or its `.tflite` (which OpenVINO reads) where it has no IR."""
    package = open_package(package_dir)
    variant = VARIANT if VARIANT in package.manifest.variants else "tflite/fp32"
    return load_model(package, variant, "openvino", {"hint": hint, "precision": "fp32"})


def decoder_for(model: LoadedModel) -> Decoder:
    manifest = model.package.manifest
    assert manifest.decoder is not None
    return make_decoder(manifest.decoder.name, manifest.decoder.params, manifest.labels)


def cpu_seconds(processes: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by this process's threads, grouped by role, and by the given processes.

    Threads Python did not start are OpenVINO's inference streams (and FFmpeg's decoding threads, if any).
    """
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    used: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        name = names.get(int(task.name))
        role = "OpenVINO" if name is None else next((r for p, r in ROLES.items() if name.startswith(p)), "other")
        used[role] = used.get(role, 0.0) + cpu_of(task / "stat")
    for role, pid in processes.items():
        used[role] = used.get(role, 0.0) + cpu_of(Path(f"/proc/{pid}/stat"))
    return used


def cpu_of(stat: Path) -> float:
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:  # a thread that ended meanwhile
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
