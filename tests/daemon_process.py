"""Running the daemon as users run it, `python -m edge_runtime run --config FILE`, from tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[1]
FACE_MODEL = REPO / "samples" / "models" / "face_detection_short_range"


def write_clip(path: Path, photo: np.ndarray, frames: int, fps: float = 10.0) -> Path:
    """A 640x480 clip of the photo sliding sideways, so every frame differs and holds one face."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (640, 480))
    face = cv2.resize(photo[20:260, 110:350], (400, 400))  # the astronaut's head, large enough to detect
    for index in range(frames):
        canvas = np.full((480, 640, 3), 40, np.uint8)
        x = 20 + (index * 4) % 200
        canvas[40:440, x : x + 400] = face
        writer.write(canvas)
    writer.release()
    return path


class DaemonProcess:
    def __init__(
        self,
        config: Path,
        env: dict[str, str] | None = None,
        exit_when_done: bool = False,
        drain_timeout: float | None = None,
    ):
        command = [sys.executable, "-m", "edge_runtime", "-v", "run", "--config", str(config)]
        if exit_when_done:
            command.append("--exit-when-done")
        if drain_timeout is not None:
            command += ["--drain-timeout", str(drain_timeout)]
        self.log_path = config.with_suffix(f".{time.monotonic_ns()}.log")
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            command, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self._log.close()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.signal(signal.SIGTERM)
        return self.wait(30)


def face_pipeline(clip_path: Path, **fields: Any) -> dict[str, Any]:
    pipeline: dict[str, Any] = {
        "name": "faces",
        "source": {"type": "file", "path": str(clip_path)},
        "model": {"path": str(FACE_MODEL)},
    }
    pipeline.update(fields)
    return pipeline


def results(payloads: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(p) for p in payloads]


class NotifyListener:
    """A real AF_UNIX datagram socket standing in for systemd's NOTIFY_SOCKET."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.env = {"NOTIFY_SOCKET": str(path)}
        self.received: list[str] = []

    def wait_for(self, text: str, timeout: float) -> str | None:
        """The first datagram containing `text`, among those received so far or within `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            found = next((m for m in self.received if text in m), None)
            if found is not None or time.monotonic() >= deadline:
                return found
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            with contextlib.suppress(TimeoutError):
                self.received.append(self.sock.recv(4096).decode())

    def close(self) -> None:
        self.sock.close()
