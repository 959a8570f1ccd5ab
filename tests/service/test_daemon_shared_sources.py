"""Two pipelines on one RTSP camera through the daemon: one connection, their own rates, a reload of one that
leaves the other's frames flowing, and the camera's own figures on the stats topic."""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from broker import Mosquitto, free_port
from daemon_process import DaemonProcess, face_pipeline

from edge_runtime.service.metrics import serve_metrics

sys.path.insert(0, str(Path(__file__).parents[1] / "sources"))

from rtsp_relay import RtspRelay

FACES = "edge/test-box/faces/result"
SLOW = "edge/test-box/slow/result"


@pytest.fixture
def camera(clip: Callable[[int], Path], tmp_path: Path) -> Iterator[RtspRelay]:
    """The face clip as H.264 at 10 fps, served over RTSP in a loop by a server that counts its clients."""
    ffmpeg = shutil.which("ffmpeg")
    assert ffmpeg, "the stream tests need ffmpeg on PATH (make test installs it)"
    h264 = tmp_path / "camera.mkv"
    command = [ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-i", str(clip(40)), "-c:v", "libx264"]
    subprocess.run([*command, "-preset", "ultrafast", "-g", "10", str(h264)], check=True, timeout=120)
    relay = RtspRelay(ffmpeg, h264, free_port(), tmp_path)
    relay.start()
    yield relay
    relay.stop()


def pipelines(clip_path: Path, slow_fps: float) -> list[dict[str, Any]]:
    return [
        face_pipeline(clip_path, source={"type": "shared", "name": "door", "max_fps": 5}),
        face_pipeline(clip_path, name="slow", source={"type": "shared", "name": "door", "max_fps": slow_fps}),
    ]


def captured_at(message: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(message["captured_at"]).replace("Z", "+00:00")).timestamp()


def rate(messages: list[bytes], since: float, until: float) -> float:
    captured = [captured_at(json.loads(m)) for m in messages]
    return sum(since <= at < until for at in captured) / (until - since)


def test_two_pipelines_share_one_rtsp_connection_and_a_reload_of_one_leaves_the_other_running(
    mosquitto: Mosquitto,
    camera: RtspRelay,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
) -> None:
    sources = {"door": {"type": "stream", "url": camera.url}}
    config = write_config(mosquitto, pipelines(clip(40), slow_fps=1), sources=sources)
    watcher = mosquitto.subscribe_collect("edge/test-box/+/result")
    stats = mosquitto.subscribe_collect("edge/test-box/stats", qos=0)
    daemon = run_daemon(config)
    assert watcher.wait_until(lambda m: sum(x.topic == SLOW for x in m) >= 2, timeout=90), daemon.log
    since = time.time()
    time.sleep(4.0)
    until = time.time() - 0.5  # what was captured up to then has been published by now
    faces_rate, slow_rate = rate(watcher.payloads(FACES), since, until), rate(watcher.payloads(SLOW), since, until)
    assert 3.0 <= faces_rate <= 6.0 and 0.5 <= slow_rate <= 1.5, (faces_rate, slow_rate)
    assert camera.connections == 1, daemon.log

    write_config(mosquitto, pipelines(clip(40), slow_fps=2), sources=sources)
    before = len(watcher.payloads(FACES))
    daemon.signal(signal.SIGHUP)
    assert watcher.wait_until(lambda _: "reloaded: added (), changed ('slow',)" in daemon.log, timeout=60), daemon.log
    assert watcher.wait_until(lambda m: sum(x.topic == FACES for x in m) >= before + 10, timeout=30), daemon.log
    faces = [json.loads(m) for m in watcher.payloads(FACES)]
    indices = [m["index"] for m in faces]
    assert indices == list(range(indices[0], indices[0] + len(indices)))  # never restarted, nothing skipped
    gaps = [captured_at(b) - captured_at(a) for a, b in itertools.pairwise(faces)]
    # at 5 fps a frame every 0.2 s, through the reload too; a box busy with other work delays a few (1 s seen)
    assert max(gaps) < 2.5, gaps
    assert camera.connections == 1, daemon.log  # the capture ran on: the camera saw no second client

    assert stats.wait_until(lambda m: any("sources" in json.loads(x.payload) for x in m), timeout=10)
    report = json.loads(next(x.payload for x in reversed(stats.messages) if b'"sources"' in x.payload))
    door = report["sources"]["door"]
    assert door["connected"] and door["pipelines"] == ["faces", "slow"] and door["reconnects"] == 0
    assert door["decoded"] <= door["frames_captured"]
    assert report["pipelines"]["slow"]["source"]["shared"] == "door"
    assert daemon.stop() == 0


def test_each_named_camera_is_a_prometheus_source_once() -> None:
    report = {
        "pipelines": {},
        "sources": {"door": {"frames_captured": 300, "decoded": 150, "reconnects": 1, "outages": 1,
                             "connected": True, "fps_captured": 10.0, "pipelines": ["faces", "slow"]}},
    }  # fmt: skip
    port = free_port()
    stop = serve_metrics(lambda: report, "127.0.0.1", port)
    try:
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        stop()
    assert 'edge_runtime_source_frames_captured_total{source="door"} 300.0' in scraped
    assert 'edge_runtime_source_decoded_total{source="door"} 150.0' in scraped
    assert 'edge_runtime_source_connected{source="door"} 1.0' in scraped
    assert 'edge_runtime_source_outages_total{source="door"} 1.0' in scraped
