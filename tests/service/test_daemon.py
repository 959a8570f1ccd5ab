from __future__ import annotations

import json
import re
import signal
import socket
import sqlite3
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import jsonschema
import numpy as np
import pytest
import yaml
from broker import Mosquitto, Received, free_port
from daemon_process import FACE_MODEL, DaemonProcess, NotifyListener, face_pipeline, results
from model_builders import build_window_mean_onnx
from waiting import wait_for

from edge_runtime.package.loader import open_package
from edge_runtime.package.manifest import ModelFormat, Precision
from edge_runtime.package.writer import describe_variant, write_package
from edge_runtime.pipeline.results import result_schema

RESULT_TOPIC = "edge/test-box/faces/result"


def test_results_arrive_with_the_documented_schema(
    mosquitto: Mosquitto,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    watcher = mosquitto.subscribe_collect("edge/test-box/#")
    pipeline = face_pipeline(clip(12), publish={"snapshot": {"enabled": True, "max_rate_hz": 100}})
    daemon = run_daemon(write_config(mosquitto, [pipeline]), exit_when_done=True)
    assert daemon.wait(120) == 0, daemon.log
    assert watcher.wait_until(lambda m: sum(x.topic == RESULT_TOPIC for x in m) >= 12, timeout=20), daemon.log
    messages = results(watcher.payloads(RESULT_TOPIC))
    schema = result_schema()
    for message in messages:
        jsonschema.validate(message, schema)
    assert sorted(m["index"] for m in messages) == list(range(12))
    assert len({m["id"] for m in messages}) == 12
    first = messages[0]
    assert first["runtime"]["precision"] == "fp32" and first["task"] == "detection"
    assert first["runtime"]["backend"] == "openvino" and "throughput hint" in daemon.log  # a file not in realtime
    assert [d["label"] for d in first["result"]["detections"]] == ["face"]
    assert first["latency_ms"]["total"] >= first["latency_ms"]["infer"] > 0
    assert all(m["frame"] == {"width": 640, "height": 480} for m in messages)  # the clip's frames
    landmarks = first["result"]["detections"][0]["keypoints"]
    assert [p["name"] for p in landmarks][:3] == ["right_eye", "left_eye", "nose_tip"]
    assert all("sha256" not in m["model"] for m in messages)
    # the model's digests are on the pipeline's retained model topic, which a subscriber joining later still gets
    late = mosquitto.subscribe_collect("edge/test-box/faces/model")
    assert late.wait_count(1, timeout=10), daemon.log
    [record] = late.messages
    variant = open_package(FACE_MODEL).manifest.variants[first["model"]["variant"]]
    assert record.retain and json.loads(record.payload) == {
        **first["model"],
        "schema_version": 2,
        "sha256": variant.files[0].sha256,
        "files": {file.path: file.sha256 for file in variant.files},
    }
    statuses = watcher.payloads("edge/test-box/status")
    assert statuses[0] == b"online" and statuses[-1] == b"offline"
    snapshot = watcher.payloads("edge/test-box/faces/snapshot")[0]
    assert cv2.imdecode(np.frombuffer(snapshot, np.uint8), cv2.IMREAD_COLOR).shape == (480, 640, 3)


def test_a_tracking_pipeline_publishes_one_track_id_for_the_face_and_the_score_threshold_on_detections(
    mosquitto: Mosquitto,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    watcher = mosquitto.subscribe_collect(RESULT_TOPIC)
    pipeline = face_pipeline(clip(12), track={"labels": ["face"]}, publish={"min_score": 0.5})
    daemon = run_daemon(write_config(mosquitto, [pipeline]), exit_when_done=True)
    assert daemon.wait(120) == 0, daemon.log
    assert watcher.wait_count(12, timeout=20), daemon.log
    messages = sorted(results(watcher.payloads(RESULT_TOPIC)), key=lambda m: int(m["index"]))
    for message in messages:
        jsonschema.validate(message, result_schema())
    faces = [message["result"]["detections"] for message in messages]
    assert all(len(found) == 1 and found[0]["score"] >= 0.5 for found in faces)
    assert "track_id" not in faces[0][0]  # confirmed on its second frame
    assert len({found[0]["track_id"] for found in faces[1:]}) == 1


def test_broker_outage_mid_stream_loses_nothing(
    persistent_broker: Mosquitto,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    broker = persistent_broker
    watcher = broker.subscribe_collect(RESULT_TOPIC, client_id="watcher")
    source = {"type": "file", "path": str(clip(60)), "realtime": True}
    daemon = run_daemon(write_config(broker, [face_pipeline(clip(60), source=source)]), exit_when_done=True)
    assert watcher.wait_count(5, timeout=60), daemon.log
    broker.stop()
    time.sleep(2.5)  # frames keep coming: their results go to the spool
    broker.restart()
    assert daemon.wait(120) == 0, daemon.log
    assert "every result reached the broker" in daemon.log
    # delivered before the exit: the broker hands them on at once, no later start is needed
    assert watcher.wait_until(lambda m: len({_index(x.payload) for x in m}) >= 60, timeout=5), daemon.log
    indices = {_index(p) for p in watcher.payloads()}
    assert indices == set(range(60))


def test_a_run_whose_broker_never_returns_exits_3_and_the_next_start_delivers(
    persistent_broker: Mosquitto,
    tmp_path: Path,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    broker = persistent_broker
    watcher = broker.subscribe_collect(RESULT_TOPIC, client_id="watcher")
    broker.stop()  # for good, as far as this run knows
    source = {"type": "file", "path": str(clip(20))}
    daemon = run_daemon(write_config(broker, [face_pipeline(clip(20), source=source)]), exit_when_done=True,
                        drain_timeout=2)  # fmt: skip
    assert daemon.wait(120) == 3, daemon.log
    spool = tmp_path / "state" / "spool.sqlite"
    assert f"20 results stay in the spool {spool}" in daemon.log and "the next start sends them" in daemon.log
    assert _spooled(spool) == 20

    idle = write_config(broker, [face_pipeline(clip(20), source=source, enabled=False)])
    stopped = run_daemon(idle)  # a service stopped while the broker is still away says what it leaves behind
    assert wait_for(lambda: "edge-runtime ready" in stopped.log, 60), stopped.log
    assert stopped.stop() == 0
    assert "20 results stay in the spool" in stopped.log

    broker.restart()
    drained = run_daemon(idle)
    assert watcher.wait_until(lambda m: len({_index(x.payload) for x in m}) >= 20, timeout=60), drained.log
    assert drained.stop() == 0
    assert {_index(p) for p in watcher.payloads()} == set(range(20))


def test_killed_daemon_replays_its_spool_on_restart(
    persistent_broker: Mosquitto,
    tmp_path: Path,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    broker = persistent_broker
    watcher = broker.subscribe_collect(RESULT_TOPIC, client_id="watcher")
    broker.stop()  # results can only go to the spool
    source = {"type": "file", "path": str(clip(50)), "realtime": True}
    config = write_config(broker, [face_pipeline(clip(50), source=source)])
    daemon = run_daemon(config)
    spool = tmp_path / "state" / "spool.sqlite"
    deadline = time.monotonic() + 60
    while _spooled(spool) < 10 and time.monotonic() < deadline:
        time.sleep(0.2)
    daemon.signal(signal.SIGKILL)
    daemon.wait(10)
    produced = _spooled(spool)
    assert produced >= 10, daemon.log

    broker.restart()
    drained = run_daemon(write_config(broker, [face_pipeline(clip(50), source=source, enabled=False)]))
    assert watcher.wait_until(lambda m: len({_index(x.payload) for x in m}) >= produced, timeout=60), drained.log
    assert drained.stop() == 0
    assert {_index(p) for p in watcher.payloads()} == set(range(produced))


def test_sigterm_stops_promptly_and_reports_to_systemd_and_prometheus(
    mosquitto: Mosquitto,
    tmp_path: Path,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    notify = NotifyListener(tmp_path / "notify.sock")
    metrics_port = free_port()
    try:
        source = {"type": "file", "path": str(clip(20)), "loop": True, "realtime": True}
        stats = {"interval_s": 1, "prometheus": {"enabled": True, "port": metrics_port}}
        config = write_config(mosquitto, [face_pipeline(clip(20), source=source)], stats=stats)
        daemon = run_daemon(config, env=notify.env)
        ready = notify.wait_for("READY=1", timeout=60)
        assert ready is not None and "STATUS=1 pipelines running, connected to the broker" in ready, daemon.log
        watcher = mosquitto.subscribe_collect(RESULT_TOPIC)
        assert watcher.wait_count(3, timeout=30)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        assert (
            'edge_runtime_pipeline_info{backend="openvino",device="CPU",pipeline="faces",precision="fp32"}' in metrics
        )
        assert 'edge_runtime_results_total{pipeline="faces"}' in metrics
        assert "edge_runtime_rollout_archives_refused_total 0.0" in metrics  # counted from the start
        started = time.monotonic()
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
        assert time.monotonic() - started < 20
        assert notify.wait_for("STOPPING=1", timeout=5) is not None
    finally:
        notify.close()
    assert "edge-runtime stopped" in daemon.log


def test_sighup_restarts_only_changed_pipelines(
    mosquitto: Mosquitto,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    looping = {"type": "file", "path": str(clip(20)), "loop": True, "realtime": True}
    first = face_pipeline(clip(20), source=looping)
    config = write_config(mosquitto, [first])
    watcher = mosquitto.subscribe_collect("edge/test-box/+/result")
    models = mosquitto.subscribe_collect("edge/test-box/+/model")
    daemon = run_daemon(config)
    assert watcher.wait_count(3, timeout=60), daemon.log
    second = face_pipeline(clip(20), name="door", source=looping)
    write_config(mosquitto, [first, second])
    daemon.signal(signal.SIGHUP)
    assert watcher.wait_until(lambda m: any(x.topic.endswith("/door/result") for x in m), timeout=60), daemon.log
    time.sleep(1)
    faces = [_index(p) for p in watcher.payloads(RESULT_TOPIC)]
    assert faces == sorted(faces) and len(set(faces)) == len(faces)  # never restarted: indices only grow
    assert "reloaded: added ('door',)" in daemon.log
    assert json.loads(models.payloads("edge/test-box/door/model")[0])["name"] == "face_detection_short_range"
    write_config(mosquitto, [first])
    daemon.signal(signal.SIGHUP)  # a pipeline removed leaves no retained model behind
    assert models.wait_until(lambda m: any(x.topic.endswith("/door/model") and not x.payload for x in m), 60), (
        daemon.log
    )
    assert daemon.stop() == 0


def test_bad_config_exits_2_with_the_field(tmp_path: Path, run_daemon: Callable[..., DaemonProcess]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("device_id: box\npipelines: []\nmqtt: {hots: x}\n")
    daemon = run_daemon(config)
    assert daemon.wait(30) == 2
    assert "mqtt.hots" in daemon.log and "Traceback" not in daemon.log


@pytest.mark.parametrize("section", ["serve", "prometheus"])
def test_a_port_another_program_holds_exits_2_naming_the_field(
    tmp_path: Path, run_daemon: Callable[..., DaemonProcess], section: str
) -> None:
    """The config checks cannot know what else listens on the box; `run` says which field's port is taken."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = {
            "device_id": "test-box",
            "mqtt": {"host": "127.0.0.1", "port": free_port()},
            "state_dir": str(tmp_path / "state"),
            "serve": {"http": {"port": 0}, "models": [{"name": "faces", "path": str(FACE_MODEL)}]},
        }
        if section == "serve":
            config["serve"]["http"]["port"] = port
        else:
            config["stats"] = {"prometheus": {"enabled": True, "port": port}}
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        daemon = run_daemon(path)
        assert daemon.wait(120) == 2, daemon.log
    field = "serve.http.port" if section == "serve" else "stats.prometheus.port"
    assert f"edge-runtime: error: {field}: cannot listen on 127.0.0.1:{port}: Address already in use" in daemon.log
    assert "Traceback" not in daemon.log


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
def test_a_qos2_pipeline_on_a_broker_without_qos2_exits_2_at_start(
    tmp_path: Path,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
    protocol: str,
) -> None:
    """As on RabbitMQ 3.10 or NATS 2.9: the daemon refuses to downgrade the pipeline's QoS silently."""
    with Mosquitto(tmp_path / "qos1-broker", listener_options=["max_qos 1"]) as broker:
        broker.start()
        pipelines = [face_pipeline(clip(5)), face_pipeline(clip(5), name="exact", publish={"qos": 2})]
        mqtt = {"host": broker.host, "port": broker.port, "protocol": protocol}
        daemon = run_daemon(write_config(broker, pipelines, mqtt=mqtt))
        assert daemon.wait(120) == 2, daemon.log
    assert f"pipelines[1].publish.qos: 2, but broker 127.0.0.1:{broker.port} takes at most QoS 1" in daemon.log
    assert "set publish.qos to 1" in daemon.log and "Traceback" not in daemon.log


def _index(payload: bytes) -> int:
    message: dict[str, Any] = json.loads(payload)
    return int(message["index"])


def _spooled(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as db:
            return int(db.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_sensor_pipeline_counts_bad_messages_and_runs_on(
    mosquitto: Mosquitto, tmp_path: Path, write_config: Callable[..., Path], run_daemon: Callable[..., DaemonProcess]
) -> None:
    package = tmp_path / "vibration"
    package.mkdir()
    build_window_mean_onnx(package / "model.onnx", length=4, channels=2)
    variant = describe_variant(package, ["model.onnx"], ModelFormat.ONNX, Precision.FP32)
    write_package(
        package,
        {"onnx/fp32": variant},
        name="vibration",
        task="regression",
        inputs=[{"shape": [1, 4, 2], "layout": "NTC"}],
        labels=["x", "y"],
        decoder={"name": "regression"},
    )
    pipeline = {
        "name": "vibration",
        "source": {"type": "mqtt", "topics": ["lab/accel"], "window": {"length": 4, "stride": 4, "channels": 2}},
        "model": {"path": str(package)},
    }
    watcher = mosquitto.subscribe_collect("edge/test-box/#")
    daemon = run_daemon(write_config(mosquitto, [pipeline]))
    # the daemon subscribes to the sensor's topic before it reports the pipeline on the same connection, so
    # a stats report that names the pipeline means the broker holds the subscription
    assert watcher.wait_until(lambda m: any(_names_pipeline(x, "vibration") for x in m), timeout=60), daemon.log
    for value in range(8):
        mosquitto.publish("lab/accel", json.dumps([value, 10 * value]).encode())
        mosquitto.publish("lab/accel", b"{not json")
    mosquitto.publish("lab/accel", json.dumps([1, 2, 3]).encode())  # three channels, not two
    mosquitto.publish("lab/accel", b"[" + b"1," * 40000 + b"1]")  # oversized
    assert watcher.wait_until(lambda m: sum(x.topic.endswith("/result") for x in m) >= 2, timeout=30), daemon.log
    values = [json.loads(p)["result"]["values"] for p in watcher.payloads("edge/test-box/vibration/result")]
    assert values[:2] == [{"x": 1.5, "y": 15.0}, {"x": 5.5, "y": 55.0}]

    def malformed() -> int:
        reports = [json.loads(p) for p in watcher.payloads("edge/test-box/stats")]
        return int(reports[-1]["pipelines"]["vibration"]["source"]["malformed"]) if reports else 0

    assert wait_for(lambda: malformed() == 10, 20), daemon.log
    assert daemon.process.poll() is None
    assert daemon.stop() == 0


def test_a_daemon_that_only_serves_answers_images_and_reports_its_queues(
    mosquitto: Mosquitto,
    face_package_dir: Path,
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    watcher = mosquitto.subscribe_collect("edge/test-box/stats")
    port = free_port()
    serve = {"http": {"port": port}, "models": [{"name": "faces", "path": str(face_package_dir)}]}
    daemon = run_daemon(write_config(mosquitto, [], serve=serve))
    assert wait_for(lambda: f"serving faces on http://127.0.0.1:{port}" in daemon.log, 60), daemon.log
    photo = (Path(__file__).resolve().parents[2] / "samples/images/astronaut.jpg").read_bytes()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v2/models/faces/infer", photo, {"Content-Type": "image/jpeg"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        message = json.loads(response.read())
    jsonschema.validate(message, result_schema())
    assert message["device_id"] == "test-box" and [d["label"] for d in message["result"]["detections"]] == ["face"]
    assert watcher.wait_until(
        lambda m: any(json.loads(x.payload).get("serving", {}).get("faces", {}).get("request_success") for x in m),
        timeout=10,
    ), daemon.log
    assert daemon.stop() == 0, daemon.log


def _names_pipeline(message: Received, name: str) -> bool:
    return message.topic == "edge/test-box/stats" and name in json.loads(message.payload)["pipelines"]


def test_the_log_says_how_far_a_file_is_and_keeps_saying_a_camera_is_away(
    mosquitto: Mosquitto,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    port = free_port()  # nothing listens there
    camera = face_pipeline(clip(10), name="gate", source={"type": "stream", "url": f"rtsp://127.0.0.1:{port}/cam"})
    file = face_pipeline(clip(120), source={"type": "file", "path": str(clip(120)), "realtime": True})
    daemon = run_daemon(write_config(mosquitto, [file, camera], stats={"interval_s": 1}))
    away = re.compile(
        rf"INFO edge_runtime: stats gate: source unavailable for \d+\.\d s \(the input cannot be opened: "
        rf"127\.0\.0\.1:{port} refused the connection \(nothing listens there\)\)(; next try in \d+\.\d s)?; 0 results"
    )
    assert wait_for(lambda: len(away.findall(daemon.log)) >= 2, 60), daemon.log
    progress = re.compile(
        r"stats faces: (\d+\.\d) fps in, .*; frame (\d+) of 120 \((\d+) %\), about (\d+\.\d s|\d+ s) left"
    )
    assert wait_for(lambda: progress.search(daemon.log) is not None, 30), daemon.log
    first = progress.search(daemon.log)
    assert first is not None and float(first.group(1)) > 0  # a rate from the first report on
    daemon.signal(signal.SIGINT)
    assert daemon.wait(30) == 0, daemon.log
    log = daemon.log
    assert log.count("received SIGINT, stopping") == 1
    stamped = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (INFO|WARNING|ERROR) ")
    lines = log.splitlines()
    assert lines and all(stamped.match(line) for line in lines), "not a line of ours: " + next(
        (line for line in lines if not stamped.match(line)), ""
    )  # FFmpeg's and OpenCV's own messages about the refused camera are silenced
