"""The container image, as users run it: `make image-test` builds it and runs these against it with Podman.

The image is named by $EDGE_RUNTIME_IMAGE; without it (a plain `pytest`, which does not collect this folder, or
this file named by hand) the module is skipped. Every container is labelled, so that the make target's cleanup
finds any an interrupted run left behind, and runs with the host's network to reach a real Mosquitto the test
starts on a free loopback port.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import pytest
import yaml
from broker import Mosquitto
from model_builders import build_tiny_classifier_onnx
from waiting import wait_for

IMAGE = os.environ.get("EDGE_RUNTIME_IMAGE", "")
if not IMAGE:
    pytest.skip("the image tests run from `make image-test`, which builds the image", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
LABEL = "edge-runtime-test"
SAMPLES = "/opt/edge-runtime/samples"
CLIP_FRAMES = int(cv2.VideoCapture(str(REPO / "samples/videos/astronaut.mp4")).get(cv2.CAP_PROP_FRAME_COUNT))
# The unit's sandbox in container form, as docs/operating/container.md gives it.
SANDBOX = ["--read-only", "--cap-drop=ALL", "--security-opt=no-new-privileges", "--tmpfs=/tmp"]
# Packages of the `dev` and `convert` extras and the build tools: none may reach the image.
NOT_IN_IMAGE = {
    "pytest", "pytest-timeout", "ruff", "mypy", "types-pyyaml", "jsonschema", "scikit-learn", "scikit-image",
    "mkdocs", "mkdocs-material", "onnx", "nncf", "tensorflow", "tensorflow-cpu", "keras", "tf2onnx", "torch",
    "matplotlib", "sympy", "pip", "setuptools", "wheel",
}  # fmt: skip


def podman(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result


def run(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`podman run --rm` of the image with the test's label and the host's network."""
    return podman("run", "--rm", f"--label={LABEL}", "--network=host", *args, timeout=timeout, check=check)


@pytest.fixture
def volumes() -> Iterator[list[str]]:
    """Fresh named volumes for the state and cache directories, removed after the test."""
    names = [f"edge-runtime-test-{kind}-{uuid.uuid4().hex[:8]}" for kind in ("state", "cache")]
    for name in names:
        podman("volume", "create", f"--label={LABEL}", name)
    yield [f"--volume={names[0]}:/var/lib/edge-runtime", f"--volume={names[1]}:/var/cache/edge-runtime"]
    podman("volume", "rm", "--force", *names, check=False)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    """A broker with a login, so that the password travels as a secret in /run/secrets."""
    with Mosquitto(tmp_path / "broker", users={"box": "s3cret-in-a-file"}) as started:
        yield started


def write_config(directory: Path, broker: Mosquitto, source: dict[str, Any]) -> list[str]:
    """The config and the broker password as files, and the options that mount them read-only."""
    config = {
        "device_id": "container-box",
        "mqtt": {"host": broker.host, "port": broker.port, "username": "box", "password": "CREDENTIAL"},
        "stats": {"interval_s": 1},
        "pipelines": [
            {"name": "faces", "source": source, "model": {"path": f"{SAMPLES}/models/face_detection_short_range"}}
        ],
    }
    text = yaml.safe_dump(config).replace("CREDENTIAL", "!credential mqtt-password")
    (directory / "config.yaml").write_text(text)
    (directory / "mqtt-password").write_text("s3cret-in-a-file\n")
    for path in (directory / "config.yaml", directory / "mqtt-password"):
        path.chmod(0o644)  # read by the image's user, not root
    return [
        f"--volume={directory / 'config.yaml'}:/etc/edge-runtime/config.yaml:ro",
        f"--volume={directory / 'mqtt-password'}:/run/secrets/mqtt-password:ro",
    ]


def test_the_image_runs_as_an_unprivileged_user_with_the_health_check_and_the_directories_declared() -> None:
    [inspected] = json.loads(podman("image", "inspect", IMAGE).stdout)
    config = inspected["Config"]
    assert config["User"] == "10001:10001"
    assert inspected["Healthcheck"]["Test"] == ["CMD", "edge-runtime", "health"]  # Podman lists it beside Config
    assert set(config["Volumes"]) == {"/var/lib/edge-runtime", "/var/cache/edge-runtime"}
    assert config["StopSignal"] in ("SIGTERM", "15")
    assert run(IMAGE, "id", "-u").stdout.strip() == "10001"
    # without a config the daemon refuses in one line naming the file, exit status 2, never a traceback
    missing = run(IMAGE, check=False)
    assert missing.returncode == 2 and "/etc/edge-runtime/config.yaml" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_every_backend_loads_and_runs_a_model(tmp_path: Path) -> None:
    probe = json.loads(run(IMAGE, "probe", "--json").stdout)
    libraries = probe["hardware"]["libraries"]
    assert {name: library["available"] for name, library in libraries.items()} == {
        "openvino": True,
        "litert": True,
        "onnxruntime": True,
    }
    onnx = build_tiny_classifier_onnx(tmp_path / "tiny.onnx")
    onnx.chmod(0o644)
    face = f"{SAMPLES}/models/face_detection_short_range"
    runs = {
        "openvino": (face,),
        "litert": (face,),
        "onnxruntime": (f"--volume={onnx}:/models/tiny.onnx:ro", "/models/tiny.onnx"),
    }
    for backend, (*mounts, model) in runs.items():
        args = ["bench", model, "--backend", backend, "--seconds", "0.3", "--json"]
        report = json.loads(run(*SANDBOX, *mounts, IMAGE, *args).stdout)
        assert [r["backend"] for r in report["results"]] == [backend], report
        assert all(r.get("error") is None for r in report["results"]), report


def test_the_daemon_in_the_sandbox_delivers_every_result_of_the_clip_to_a_broker(
    tmp_path: Path, broker: Mosquitto, volumes: list[str]
) -> None:
    watcher = broker.subscribe_collect("edge/container-box/faces/result")
    mounts = write_config(tmp_path, broker, {"type": "file", "path": f"{SAMPLES}/videos/astronaut.mp4"})
    done = run(*SANDBOX, *volumes, *mounts, IMAGE, "run", "--config", "/etc/edge-runtime/config.yaml",
               "--exit-when-done", "--drain-timeout", "60", check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every result reached the broker" in done.stderr
    assert watcher.wait_until(lambda messages: len(messages) >= CLIP_FRAMES, timeout=10)
    indices = {json.loads(payload)["index"] for payload in watcher.payloads()}
    assert CLIP_FRAMES >= 30 and indices == set(range(CLIP_FRAMES))


def test_the_health_check_fails_while_delivery_or_the_daemon_stalls_and_sigterm_stops_it_cleanly(
    tmp_path: Path, broker: Mosquitto, volumes: list[str]
) -> None:
    source = {"type": "file", "path": f"{SAMPLES}/videos/astronaut.mp4", "loop": True, "realtime": True}
    mounts = write_config(tmp_path, broker, source)
    name = f"edge-runtime-test-{uuid.uuid4().hex[:8]}"
    # a stall window of 2 s instead of 30 (as systemd's WatchdogSec= sets it), and every failed check counted
    health = ["--env=WATCHDOG_USEC=2000000", "--health-start-period=0s", "--health-retries=1"]
    podman("run", "--detach", f"--name={name}", f"--label={LABEL}", "--network=host", *SANDBOX, *volumes, *mounts,
           *health, IMAGE)  # fmt: skip
    try:

        def healthy() -> bool:
            return podman("healthcheck", "run", name, check=False, timeout=30).returncode == 0

        assert wait_for(healthy, timeout=120, interval=1), podman("logs", name).stderr
        assert broker._process is not None
        os.kill(broker._process.pid, signal.SIGSTOP)  # connected, but nothing is acknowledged any more
        try:
            assert wait_for(lambda: not healthy(), timeout=30, interval=1), podman("logs", name).stderr
            verdict = podman("exec", name, "edge-runtime", "health", check=False)
            assert verdict.returncode == 1 and verdict.stderr.startswith("stalled: mqtt delivery silent for")
        finally:
            os.kill(broker._process.pid, signal.SIGCONT)
        assert wait_for(healthy, timeout=30, interval=1), podman("logs", name).stderr

        podman("kill", "--signal=SIGSTOP", name)  # the daemon, every pipeline with it, frozen
        try:
            assert wait_for(lambda: not healthy(), timeout=30, interval=1), podman("logs", name).stderr
            verdict = podman("exec", name, "edge-runtime", "health", check=False)
            assert verdict.returncode == 1 and "has not reported for" in verdict.stderr
        finally:
            podman("kill", "--signal=SIGCONT", name)
        assert wait_for(healthy, timeout=30, interval=1), podman("logs", name).stderr

        started = time.monotonic()
        podman("stop", "--time=30", name, timeout=60)
        assert time.monotonic() - started < 25  # SIGTERM handled: no SIGKILL after the grace
        [state] = json.loads(podman("inspect", name).stdout)
        assert state["State"]["ExitCode"] == 0
        logs = podman("logs", name)
        assert "received SIGTERM, stopping" in logs.stderr and "edge-runtime stopped" in logs.stderr
    finally:
        podman("rm", "--force", "--time=5", name, check=False)


def test_the_demo_shows_results_with_nothing_mounted() -> None:
    demo = run(IMAGE, "demo", timeout=180)
    assert f"summary: {CLIP_FRAMES} frames" in demo.stdout, demo.stdout + demo.stderr
    assert "frame   0: face" in demo.stdout


def test_the_image_holds_the_wheel_and_no_test_dev_or_build_package() -> None:
    listing = "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name'].lower(): \
(d.read_text('direct_url.json') or '') for d in m.distributions()}))"
    installed = json.loads(run(IMAGE, "python3", "-c", listing).stdout)
    assert "edge-runtime" in installed and "editable" not in installed["edge-runtime"]
    assert {"openvino", "ai-edge-litert", "onnxruntime"} <= set(installed)
    assert sorted(NOT_IN_IMAGE & set(installed)) == []
    where = "import edge_runtime.backends.onnxruntime as b; print(b.__file__)"
    assert "/opt/edge-runtime/venv/lib/python3" in run(IMAGE, "python3", "-c", where).stdout
    # the project's own tests, test data or samples installed as packages beside it
    shipped = "import edge_runtime, pathlib; root = pathlib.Path(edge_runtime.__file__).parents[1]; \
print(sorted(p.name for p in root.iterdir() if p.name in ('tests', 'samples', 'bench', 'conftest.py')))"
    assert run(IMAGE, "python3", "-c", shipped).stdout.strip() == "[]"
    size = int(podman("image", "inspect", "--format={{.Size}}", IMAGE).stdout)
    assert size < 1_500_000_000  # ~0.9 GB; TensorFlow or PyTorch from a dev extra would add more than 0.6 GB
