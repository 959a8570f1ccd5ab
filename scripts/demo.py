"""The quick-start demo: the daemon on a bundled clip, results read back from a real broker.

1. starts Mosquitto on a free loopback port (installed by `make demo` where possible);
2. runs `edge-runtime run` on samples/videos/astronaut.mp4 with MediaPipe's face detector;
3. subscribes and prints each result as it arrives, saves the annotated snapshot;
4. ends with a summary: frames, results, fps, latency.

Without a broker it says how to get one and runs the same pipeline locally, printing the results.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
CLIP = REPO / "samples" / "videos" / "astronaut.mp4"
MODEL = REPO / "samples" / "models" / "face_detection_short_range"
OUTPUT = REPO / "demo-output"
DEVICE_ID = "demo-box"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def mosquitto_binary() -> str | None:
    return shutil.which("mosquitto") or next(
        (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if Path(p).is_file()), None
    )


def start_broker(binary: str, directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    config = directory / "mosquitto.conf"
    config.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    broker = subprocess.Popen([binary, "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return broker, port
        time.sleep(0.05)
    broker.kill()
    raise SystemExit("mosquitto did not start")


def daemon_config(port: int, directory: Path) -> Path:
    config = {
        "device_id": DEVICE_ID,
        "mqtt": {"host": "127.0.0.1", "port": port},
        "state_dir": str(directory / "state"),
        "cache_dir": str(directory / "cache"),
        "stats": {"interval_s": 2},
        "pipelines": [
            {
                "name": "faces",
                "source": {"type": "file", "path": str(CLIP), "realtime": True},
                "model": {"path": str(MODEL)},
                "publish": {"qos": 1, "snapshot": {"enabled": True, "max_rate_hz": 1}},
            }
        ],
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def describe(result: dict[str, Any]) -> str:
    found = result["result"].get("detections", [])
    faces = ", ".join(f"{d['label']} {d['score']:.2f} at {[round(v) for v in d['box']]}" for d in found) or "nothing"
    latency = result["latency_ms"]
    return f"frame {result['index']:3d}: {faces}  (infer {latency['infer']:.1f} ms, total {latency['total']:.1f} ms)"


def run_with_broker(binary: str) -> int:
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        broker, port = start_broker(binary, directory)
        received: list[dict[str, Any]] = []
        snapshot: list[bytes] = []

        def on_message(_client: Any, _userdata: Any, message: Any) -> None:
            if message.topic.endswith("/result"):
                result = json.loads(message.payload)
                received.append(result)
                print(describe(result), flush=True)
            elif message.topic.endswith("/snapshot"):
                snapshot[:] = [bytes(message.payload)]

        client = mqtt.Client(CallbackAPIVersion.VERSION2)
        client.on_message = on_message
        client.connect("127.0.0.1", port)
        client.subscribe(f"edge/{DEVICE_ID}/#", qos=1)
        client.loop_start()
        print(f"broker on 127.0.0.1:{port}; subscribed to edge/{DEVICE_ID}/#\n", flush=True)
        started = time.monotonic()
        command = [sys.executable, "-m", "edge_runtime", "run", "--config", str(daemon_config(port, directory))]
        status = subprocess.run([*command, "--exit-when-done"], check=False).returncode
        elapsed = time.monotonic() - started
        time.sleep(0.5)
        client.loop_stop()
        broker.terminate()
        broker.wait(10)
    if status != 0:
        return status
    save_snapshot(snapshot[0] if snapshot else None)
    summarise(received, elapsed)
    return 0


def run_locally() -> int:
    """No broker: the same source, model and decoder, with results printed instead of published."""
    from edge_runtime.decoders import make_decoder
    from edge_runtime.mqtt.topics import Topics
    from edge_runtime.package.loader import open_package
    from edge_runtime.pipeline.outputs import PublishPolicy
    from edge_runtime.pipeline.streaming import Pipeline
    from edge_runtime.placement.loading import load_selected, look_at_box, select_for
    from edge_runtime.sources import make_source
    from edge_runtime.sources.configs import FileSourceConfig

    received: list[dict[str, Any]] = []
    snapshot: list[bytes] = []

    class PrintingSink:
        def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> None:
            if topic.endswith("/result"):
                received.append(json.loads(payload))
                print(describe(received[-1]), flush=True)
            else:
                snapshot[:] = [payload]

    package = open_package(MODEL)
    model, _ = load_selected(package, select_for(package, look_at_box()))
    decoder = package.manifest.decoder
    assert decoder is not None
    pipeline = Pipeline(
        name="faces",
        topics=Topics("edge", DEVICE_ID),
        source=make_source(FileSourceConfig(type="file", path=CLIP, realtime=True), f"file:{CLIP}"),
        model=model,
        decoder=make_decoder(decoder.name, decoder.params, package.manifest.labels),
        input_spec=model.input_specs[0],
        policy=PublishPolicy(snapshot_interval_s=1.0),
        sink=PrintingSink(),
    )
    started = time.monotonic()
    pipeline.start()
    pipeline.finished.wait(120)
    pipeline.stop()
    save_snapshot(snapshot[0] if snapshot else None)
    summarise(received, time.monotonic() - started)
    return 0


def save_snapshot(jpeg: bytes | None) -> None:
    if jpeg is None:
        return
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "snapshot.jpg").write_bytes(jpeg)
    print(f"\nannotated snapshot saved to {(OUTPUT / 'snapshot.jpg').relative_to(REPO)}")


def summarise(received: list[dict[str, Any]], elapsed: float) -> None:
    if not received:
        print("no results arrived")
        return
    infer = np.array([r["latency_ms"]["infer"] for r in received])
    total = np.array([r["latency_ms"]["total"] for r in received])
    faces = sum(1 for r in received if r["result"].get("detections"))
    print(
        f"\nsummary: {len(received)} frames, {faces} with a face, {len(received) / elapsed:.1f} results/s "
        f"over {elapsed:.1f} s (the clip plays at its own 10 fps)\n"
        f"latency: infer median {np.median(infer):.2f} ms, p90 {np.percentile(infer, 90):.2f} ms; "
        f"capture to result median {np.median(total):.2f} ms, p90 {np.percentile(total, 90):.2f} ms\n"
        f"ran on {received[0]['runtime']['backend']} {received[0]['runtime']['device']} "
        f"at {received[0]['runtime']['precision']}, model variant {received[0]['model']['variant']}"
    )


def main() -> int:
    binary = mosquitto_binary()
    if binary is None:
        print(
            "No MQTT broker found: install one with `sudo apt-get install mosquitto` (Debian/Ubuntu) to see results\n"
            "arrive over MQTT. Running the same pipeline locally instead, results printed here.\n"
        )
        return run_locally()
    return run_with_broker(binary)


if __name__ == "__main__":
    raise SystemExit(main())
