"""Real media and servers for the source tests: coded videos, an ffmpeg stream server, a Mosquitto broker."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from broker import free_port
from rtsp_relay import RtspRelay
from source_media import FPS, FRAMES, SIZE, StreamServer, frame_number, stamp

_H264 = ["-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-g", "15"]


def _write_video(path: Path, frames: Iterator[np.ndarray]) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), FPS, SIZE)
    assert writer.isOpened(), "OpenCV cannot write MJPG video"
    for frame in frames:
        writer.write(frame)
    writer.release()
    return path


def _scene(photo: np.ndarray) -> np.ndarray:
    return cv2.resize(photo, (800, 800), interpolation=cv2.INTER_LINEAR)


@pytest.fixture(scope="session")
def moving_video(astronaut_bgr: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """90 frames at 30 fps, 640x480 MJPG: a window panning over a real photo, each frame numbered."""
    scene = _scene(astronaut_bgr)

    def frames() -> Iterator[np.ndarray]:
        for number in range(FRAMES):
            x, y = int(number * 1.5), number * 3
            frame = np.ascontiguousarray(scene[y : y + SIZE[1], x : x + SIZE[0]])
            stamp(frame, number)
            yield frame

    return _write_video(tmp_path_factory.mktemp("video") / "moving.avi", frames())


@pytest.fixture(scope="session")
def still_video(astronaut_bgr: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 identical frames of the photo: a scene with no motion at all."""
    frame = np.ascontiguousarray(_scene(astronaut_bgr)[100 : 100 + SIZE[1], 80 : 80 + SIZE[0]])
    return _write_video(tmp_path_factory.mktemp("video") / "still.avi", iter([frame] * 60))


@pytest.fixture(scope="session")
def ffmpeg() -> str:
    path = shutil.which("ffmpeg")
    assert path, "the stream tests need ffmpeg on PATH (make test installs it)"
    return path


@pytest.fixture(scope="session")
def h264_stream_file(moving_video: Path, ffmpeg: str) -> Path:
    """The moving video as H.264 (in Matroska), what a network camera would send."""
    target = moving_video.with_name("moving.mkv")
    subprocess.run(
        [ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-i", str(moving_video), *_H264, str(target)],
        check=True,
        timeout=120,
    )
    return target


@pytest.fixture
def stream_server(ffmpeg: str, h264_stream_file: Path) -> Iterator[StreamServer]:
    server = StreamServer(ffmpeg, h264_stream_file, free_port())
    yield server
    server.kill()


@pytest.fixture
def rtsp_relay(ffmpeg: str, h264_stream_file: Path, tmp_path: Path) -> Iterator[RtspRelay]:
    relay = RtspRelay(ffmpeg, h264_stream_file, free_port(), tmp_path)
    yield relay
    relay.stop()


@pytest.fixture(scope="session")
def read_frame_number() -> Callable[[np.ndarray], int]:
    return frame_number
