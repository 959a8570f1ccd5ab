"""Fixtures for the service tests: the daemon as a real process against a real broker, and a real AF_UNIX
datagram socket standing in for systemd's notification socket."""

from __future__ import annotations

import socket
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))

from broker import Mosquitto
from daemon_process import DaemonProcess, write_clip
from notify_socket import NotifySocket


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[NotifySocket]:
    """A socket bound to a path, as systemd's /run/systemd/notify."""
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        yield NotifySocket(sock, str(path))


@pytest.fixture
def abstract_notify_socket() -> Iterator[NotifySocket]:
    """A socket in the abstract namespace, written '@name' in NOTIFY_SOCKET."""
    name = f"edge-runtime-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        yield NotifySocket(sock, "@" + name)


@pytest.fixture
def clip(astronaut_bgr: np.ndarray, tmp_path: Path) -> Callable[[int], Path]:
    return lambda frames: write_clip(tmp_path / f"clip-{frames}.mp4", astronaut_bgr, frames)


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """Writes a daemon config for the test broker; keyword arguments replace top-level sections."""

    def write(broker: Any, pipelines: list[dict[str, Any]], name: str = "config.yaml", **sections: Any) -> Path:
        config = {
            "device_id": "test-box",
            "mqtt": {"host": broker.host, "port": broker.port, "client_id": "edge-test-box"},
            "state_dir": str(tmp_path / "state"),
            "cache_dir": str(tmp_path / "cache"),
            "stats": {"interval_s": 1},
            "log_level": "info",
            "pipelines": pipelines,
        }
        config.update(sections)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(config))
        return path

    return write


@pytest.fixture
def run_daemon() -> Iterator[Callable[..., DaemonProcess]]:
    started: list[DaemonProcess] = []

    def start(config: Path, **kwargs: Any) -> DaemonProcess:
        daemon = DaemonProcess(config, **kwargs)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.wait(10)


@pytest.fixture
def persistent_broker(tmp_path: Path) -> Iterator[Mosquitto]:
    """A broker that keeps sessions across its own restarts, as a production broker does."""
    broker = Mosquitto(tmp_path / "persistent-broker", persistence=True).start()
    yield broker
    broker.close()
