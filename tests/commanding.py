"""What the daemon-level control tests share: an operator's MQTT client, a fleet of keys, releases, a broker
and an HTTP server, and a daemon config whose pipeline plays a clip in a loop at its frame rate."""

from __future__ import annotations

import contextlib
import functools
import json
import queue
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import cv2
import paho.mqtt.client as paho
import yaml
from broker import Mosquitto
from daemon_process import FACE_MODEL, write_clip
from live_rollout import signed_release
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edge_runtime.control.signed import sign_command
from edge_runtime.package.archive import unpack
from edge_runtime.package.loader import sha256_of
from edge_runtime.package.signing import generate_keys

DEVICE = "gate-3"
PREFIX = "edge"
RESULTS = f"{PREFIX}/{DEVICE}/faces/result"


class Operator:
    """An operator's program on the broker: sends signed commands, reads the answers on its reply topic."""

    def __init__(self, broker: Mosquitto, key: Path) -> None:
        self.key = key
        self.answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._client = paho.Client(CallbackAPIVersion.VERSION2, protocol=MQTTProtocolVersion.MQTTv5)
        subscribed = threading.Event()
        self._client.on_subscribe = lambda *_: subscribed.set()
        self._client.on_message = lambda _c, _u, m: self.answers.put(json.loads(m.payload))
        self._client.connect(broker.host, broker.port)
        self._client.loop_start()
        self._client.subscribe("ops/answers", 1)
        assert subscribed.wait(5)

    def send(self, document: Any, device: str = DEVICE, timeout: float = 30) -> dict[str, Any]:
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.ResponseTopic = "ops/answers"
        properties.CorrelationData = uuid.uuid4().bytes
        payload = document if isinstance(document, bytes) else json.dumps(document).encode()
        self._client.publish(f"{PREFIX}/{device}/command", payload, qos=1, properties=properties)
        return self.answers.get(timeout=timeout)

    def command(self, name: str, args: dict[str, Any] | None = None, **signing: Any) -> dict[str, Any]:
        return self.send(sign_command(self.key, DEVICE, name, args, **signing))

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


@dataclass
class Fleet:
    """What the tests of this module share: keys, signed releases, a broker, an HTTP server and the daemon."""

    root: Path
    broker: Mosquitto
    operator_key: Path
    package_key: Path
    releases: Path  # served over HTTP
    url: str
    config: Path
    watcher: Any

    def release(self, number: int, version: str) -> tuple[str, str]:
        """A signed archive of the face package as `version`, on the HTTP server: its URL and sha256."""
        target = self.releases / f"release-{number}.tar"
        if not target.exists():
            archive = signed_release(FACE_MODEL, self.root / f"build-{number}", self.package_key, number, version)
            archive.replace(target)
        return f"{self.url}/{target.name}", sha256_of(target)

    def versions_since(self, start: int) -> list[str]:
        """The model versions results name from the `start`-th result on, one entry per run of equal versions."""
        runs: list[str] = []
        for payload in self.watcher.payloads(RESULTS)[start:]:
            version = json.loads(payload)["model"]["version"]
            if not runs or runs[-1] != version:
                runs.append(version)
        return runs

    def rollout_state(self, rollout_id: str) -> dict[str, Any] | None:
        payloads = self.watcher.payloads(f"{PREFIX}/{DEVICE}/rollout/{rollout_id}")
        return json.loads(payloads[-1]) if payloads else None


def write_config(root: Path, broker: Mosquitto, **sections: Any) -> Path:
    clip = write_clip(root / "clip.mp4", cv2.imread(str(FACE_MODEL.parents[1] / "images/astronaut.jpg")), 40)
    config = {
        "device_id": DEVICE,
        "mqtt": {"host": broker.host, "port": broker.port, "client_id": f"edge-{DEVICE}", "topic_prefix": PREFIX},
        "state_dir": str(root / "state"),
        "cache_dir": str(root / "cache"),
        "stats": {"interval_s": 1},
        "trust": {"keys": [str(root / "keys" / "packages.pub")]},
        "control": {"keys": [str(root / "keys" / "ops.pub")]},
        # Loose latency bound: the steps are under test here, on a machine busy with the daemon and the test.
        "rollout": {"shadow": {"items": 10, "max_latency_ratio": 5.0}, "probation": {"seconds": 2, "stall_seconds": 8}},
        "pipelines": [
            {
                "name": "faces",
                "source": {"type": "file", "path": str(clip), "loop": True, "realtime": True},
                "model": {"path": str(root / "installed" / "v1"), "backend": "openvino", "precision": "fp32"},
            }
        ],
    } | sections
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextlib.contextmanager
def make_fleet(root: Path) -> Iterator[Fleet]:
    """Keys, release 1 installed as the configured package, an HTTP server for releases, and a broker."""
    operator_key, _ = generate_keys("ops", root / "keys")
    package_key, _ = generate_keys("packages", root / "keys")
    first = unpack(signed_release(FACE_MODEL, root / "build-1", package_key, 1, "1.0"), root / "installed")
    first.rename(root / "installed" / "v1")
    releases = root / "releases"
    releases.mkdir()
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(releases))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with Mosquitto(root / "broker") as broker:
        watcher = broker.subscribe_collect(f"{PREFIX}/{DEVICE}/#")
        config = write_config(root, broker)
        yield Fleet(root, broker, operator_key, package_key, releases, f"http://127.0.0.1:{server.server_port}",
                    config, watcher)  # fmt: skip
    server.shutdown()


def stalling_url(fleet: Fleet, tmp_path: Path) -> str:
    """A server that sends headers and a few bytes, then nothing: the download stays in progress."""

    class Stalling(SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"x" * 10)
            self.wfile.flush()
            threading.Event().wait(60)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Stalling)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}/package.tar"
