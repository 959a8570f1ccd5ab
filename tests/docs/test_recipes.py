"""The recipes that run on a CPU box, run as the pages give them: their config files, a real RTSP camera stand-in,
a real Mosquitto broker, the daemon as a process, and the results read back from the broker."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker import Mosquitto, free_port
from daemon_process import DaemonProcess
from doc_snippets import SAMPLES, Sandbox, full_configs
from rtsp_relay import RtspRelay
from waiting import wait_for


@pytest.fixture(scope="module")
def camera_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample clip as H.264, which network cameras send."""
    ffmpeg = shutil.which("ffmpeg")
    assert ffmpeg, "the recipe tests need ffmpeg on PATH (make test installs it)"
    target = tmp_path_factory.mktemp("camera") / "camera.mkv"
    subprocess.run(
        [ffmpeg, "-hide_banner", "-loglevel", "error", "-i", str(SAMPLES / "videos" / "astronaut.mp4"),
         "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-g", "10", str(target)],
        check=True, timeout=120,
    )  # fmt: skip
    return target


@pytest.fixture
def camera(camera_clip: Path, tmp_path: Path) -> Iterator[RtspRelay]:
    """A network camera: RTSP over TCP, the clip in a loop at its own 10 fps."""
    relay = RtspRelay(shutil.which("ffmpeg") or "ffmpeg", camera_clip, free_port(), tmp_path)
    relay.start()
    yield relay
    relay.stop()


def camera_url(relay: RtspRelay) -> str:
    """The camera's address as the recipe's credential holds it: with a user and password."""
    return relay.url.replace("rtsp://", "rtsp://viewer:the-password@")


def on_test_broker(config: str, broker: Mosquitto) -> str:
    """The recipe's config with its `mqtt:` section pointed at the test's broker; everything else as written."""
    section = re.compile(r"^mqtt:\n(?:[ #].*\n)*", re.MULTILINE)
    assert section.search(config), "the recipe names no broker"
    return section.sub(f"mqtt:\n  host: {broker.host}\n  port: {broker.port}\n", config, count=1)


def messages(collector: Any, pipeline: str) -> list[dict[str, Any]]:
    return [json.loads(m.payload) for m in list(collector.messages) if m.topic.split("/")[2] == pipeline]


def test_rtsp_camera_to_faces_and_people(sandbox: Sandbox, mosquitto: Mosquitto, camera: RtspRelay) -> None:
    (recipe,) = full_configs("recipes/rtsp-camera.md")
    sandbox.credentials["door-camera-url"] = camera_url(camera)
    config = sandbox.write(on_test_broker(recipe.text, mosquitto))
    results = mosquitto.subscribe_collect("edge/gate-3/+/result")
    snapshots = mosquitto.subscribe_collect("edge/gate-3/door-people/snapshot")
    daemon = DaemonProcess(config, env=sandbox.env)
    try:
        assert results.wait_until(
            lambda _: len(messages(results, "door-faces")) >= 5 and messages(results, "door-people"), timeout=60
        ), daemon.log
        faces, people = messages(results, "door-faces"), messages(results, "door-people")
        for result in faces + people:
            assert result["source"] == "stream:" + camera_url(camera).replace("the-password", "***")
            assert result["task"] == "detection"
        assert all(d["label"] == "face" and d["score"] >= 0.6 for r in faces for d in r["result"]["detections"])
        assert people[0]["result"]["detections"][0]["label"] == "person"
        assert people[0]["runtime"]["backend"] == "litert"
        assert snapshots.wait_count(1, timeout=30), daemon.log
        assert snapshots.messages[0].payload.startswith(b"\xff\xd8")  # a JPEG

        camera.stop()  # the camera loses power: the log says so and when the next try comes
        assert wait_for(lambda: "next try in" in daemon.log, timeout=30), daemon.log
        camera.start()
        before = len(messages(results, "door-faces"))
        assert wait_for(lambda: "reconnected after" in daemon.log, timeout=60), daemon.log
        assert results.wait_until(lambda _: len(messages(results, "door-faces")) > before + 3, timeout=30)
    finally:
        status = daemon.stop()
    assert status == 0, daemon.log
    assert "edge-runtime ready: door-faces, door-people, connected to the broker" in daemon.log


@pytest.mark.parametrize(
    ("page_index", "pipeline", "task", "labels", "package"),
    [
        (0, "yard", "detection", {"person", "bicycle", "car"}, "yolo_package_as_is"),
        (0, "yard", "detection", {"person", "bicycle", "car"}, "yolo_package"),
        (1, "belt", "classification", {f"part-{c}" for c in "abcdefghij"}, "classifier_package"),
    ],
    ids=["yolo-package-make", "yolo-edge-convert", "classifier"],
)
def test_your_own_model_on_a_camera(
    sandbox: Sandbox,
    mosquitto: Mosquitto,
    camera: RtspRelay,
    request: pytest.FixtureRequest,
    page_index: int,
    pipeline: str,
    task: str,
    labels: set[str],
    package: str,
) -> None:
    """The recipe's packages come from its own `package make` and edge-convert command lines (see conftest.py);
    here its configs run, the YOLO detector's once with each of its packages."""
    recipe = full_configs("recipes/your-own-model.md")[page_index]
    made: Path = request.getfixturevalue(package)

    def copy_made(path: Path, _pipeline: dict[str, Any]) -> None:
        shutil.copytree(made, path)

    sandbox.model_makers[made.name] = copy_made
    for name in ("yard-camera-url", "belt-camera-url"):
        sandbox.credentials[name] = camera_url(camera)
    config = sandbox.write(on_test_broker(recipe.text, mosquitto))
    results = mosquitto.subscribe_collect(f"edge/gate-3/{pipeline}/result")
    daemon = DaemonProcess(config, env=sandbox.env)
    try:
        assert results.wait_count(3 if task == "detection" else 1, timeout=60), daemon.log
    finally:
        status = daemon.stop()
    assert status == 0, daemon.log
    found = messages(results, pipeline)
    assert {r["task"] for r in found} == {task}
    if task == "detection":
        assert found[0]["model"]["name"] == "best"
        if package == "yolo_package_as_is":  # the one variant, as the recipe's result shows it
            assert found[0]["model"] == {"name": "best", "version": "1", "variant": "onnx/fp32"}
        named = {d["label"] for r in found for d in r["result"]["detections"]}
        assert named and named <= labels
        assert all(d["score"] >= 0.4 for r in found for d in r["result"]["detections"])
    else:
        classes = found[0]["result"]["classes"]
        assert len(classes) == 3 and {c["label"] for c in classes} <= labels


def test_sensor_readings_over_mqtt_become_verdicts(sandbox: Sandbox, mosquitto: Mosquitto) -> None:
    """The pump's model is a stand-in with the recipe's input shape: its score is the largest mean of a channel."""
    (recipe,) = full_configs("recipes/sensors.md")
    config = sandbox.write(on_test_broker(recipe.text, mosquitto))
    results = mosquitto.subscribe_collect("edge/pump-house/pump-1/result")
    daemon = DaemonProcess(config, env=sandbox.env)
    try:
        assert wait_for(lambda: "edge-runtime ready" in daemon.log, timeout=60), daemon.log
        for value in [0.1] * 128 + [2.0] * 128:  # a quiet pump, then a shaking one
            payload = json.dumps({"values": [0.0, value, -value]}).encode()
            mosquitto.publish("sensors/pump-1/accel", payload)
        assert results.wait_count(2, timeout=30), daemon.log
    finally:
        status = daemon.stop()
    assert status == 0, daemon.log
    first, second = messages(results, "pump-1")[:2]
    assert (first["kind"], first["task"], first["source"]) == ("window", "anomaly", "mqtt:sensors/pump-1/accel")
    assert first["result"] == {"score": pytest.approx(0.1, abs=1e-3), "anomalous": False}
    assert second["result"]["anomalous"] is True and second["index"] > first["index"]


def test_predictions_on_request_over_http_and_mqtt(sandbox: Sandbox, mosquitto: Mosquitto) -> None:
    """The recipe's first config (its HTTP port moved to a free one), asked as the page asks: curl's request over
    HTTP, and mosquitto_pub's MQTT 5 request with a content type and a response topic."""
    import urllib.request

    import paho.mqtt.client as paho
    from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    recipe = full_configs("recipes/predictions-on-request.md")[0]
    port = free_port()
    assert "port: 8000" in recipe.text
    config = sandbox.write(on_test_broker(recipe.text.replace("port: 8000", f"port: {port}"), mosquitto))
    photo = (SAMPLES / "images" / "astronaut.jpg").read_bytes()
    daemon = DaemonProcess(config, env=sandbox.env)
    try:
        assert wait_for(lambda: "edge-runtime ready" in daemon.log, timeout=60), daemon.log
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v2/models/faces/infer", data=photo, headers={"Content-Type": "image/jpeg"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        (face,) = answer["result"]["detections"]
        assert face["label"] == "face" and face["score"] > 0.8
        assert 150 < face["box"][0] < face["box"][2] < 300  # in the photo's own 512 x 512 pixels

        replies = mosquitto.subscribe_collect("replies/my-app")
        client = paho.Client(CallbackAPIVersion.VERSION2, protocol=MQTTProtocolVersion.MQTTv5)
        client.connect(mosquitto.host, mosquitto.control_port)
        client.loop_start()
        properties = Properties(PacketTypes.PUBLISH)
        properties.ContentType = "image/jpeg"
        properties.ResponseTopic = "replies/my-app"
        client.publish("edge/gate-3/infer/faces", photo, qos=1, properties=properties).wait_for_publish(5)
        assert replies.wait_count(1, timeout=30), daemon.log
        client.disconnect()
        client.loop_stop()
        over_mqtt = json.loads(replies.messages[0].payload)
        assert over_mqtt["result"]["detections"][0]["box"] == face["box"]
    finally:
        status = daemon.stop()
    assert status == 0, daemon.log
    assert f"serving faces on http://127.0.0.1:{port}" in daemon.log


def test_two_models_on_one_camera_open_it_once(sandbox: Sandbox, mosquitto: Mosquitto, camera: RtspRelay) -> None:
    (recipe,) = full_configs("recipes/two-models-one-camera.md")
    sandbox.credentials["door-camera-url"] = camera_url(camera)
    config = sandbox.write(on_test_broker(recipe.text, mosquitto))
    results = mosquitto.subscribe_collect("edge/gate-3/+/result")
    stats = mosquitto.subscribe_collect("edge/gate-3/stats", qos=0)
    daemon = DaemonProcess(config, env=sandbox.env)
    try:
        assert results.wait_until(
            lambda _: len(messages(results, "door-faces")) >= 3 and messages(results, "door-people"), timeout=60
        ), daemon.log
        faces, people = messages(results, "door-faces"), messages(results, "door-people")
        assert {result["source"] for result in faces + people} == {"shared:door"}
        assert people[0]["result"]["detections"][0]["label"] == "person"
        assert stats.wait_until(lambda m: any(b'"sources"' in x.payload for x in m), timeout=60), daemon.log
    finally:
        status = daemon.stop()
    assert status == 0, daemon.log
    assert camera.connections == 1  # one capture for both pipelines
    report = json.loads(next(x.payload for x in stats.messages if b'"sources"' in x.payload))
    assert report["sources"]["door"]["pipelines"] == ["door-faces", "door-people"]
