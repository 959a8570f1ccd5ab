"""Helpers of the source tests: numbered video frames, free ports, an ffmpeg stream server."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_runtime.sources.base import EndOfSource, Item, Source

FPS = 30
FRAMES = 90
SIZE = (640, 480)
_BITS = 10
_BLOCK_W, _BLOCK_H, _BLOCK_Y = 40, 24, 8


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def serving(port: int) -> bool:
    """Whether a socket listens on the port or has accepted a client on it, found without connecting
    (a connection would use up a one-client server)."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text(encoding="ascii").splitlines()[1:]]
    return any(row[1].endswith(f":{port:04X}") and row[3] in ("0A", "01") for row in rows)


def wait_until_serving(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not serving(port):
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listens on port {port} after {timeout} s")
        time.sleep(0.02)


def stamp(image: np.ndarray, number: int) -> None:
    """Write the frame number as black/white blocks that survive JPEG and H.264 compression."""
    for bit in range(_BITS):
        x = 8 + bit * (_BLOCK_W + 8)
        value = 255 if (number >> bit) & 1 else 0
        image[_BLOCK_Y : _BLOCK_Y + _BLOCK_H, x : x + _BLOCK_W] = value


def frame_number(image: np.ndarray) -> int:
    """The number `stamp` wrote into a decoded frame."""
    number = 0
    for bit in range(_BITS):
        x = 8 + bit * (_BLOCK_W + 8)
        block = image[_BLOCK_Y + 6 : _BLOCK_Y + _BLOCK_H - 6, x + 8 : x + _BLOCK_W - 8]
        if float(block.mean()) > 128:
            number |= 1 << bit
    return number


@dataclass
class StreamServer:
    """ffmpeg serving a file over HTTP (MPEG-TS) in listen mode: the stream exists while it runs."""

    ffmpeg: str
    media: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/cam"

    def start(self) -> None:
        command = [self.ffmpeg, "-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1"]
        command += ["-i", str(self.media), "-c", "copy", "-f", "mpegts", "-listen", "1", self.url]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        wait_until_serving(self.port)

    def freeze(self) -> None:
        """Stop the process without closing its connection: a stream that hangs."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None


def read_all(source: Source, timeout: float = 30.0) -> list[Item]:
    """Everything a finite source delivers, read as a pipeline would, until EndOfSource."""
    items: list[Item] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            item = source.read(0.5)
        except EndOfSource:
            return items
        if item is not None:
            items.append(item)
    raise AssertionError(f"{source.name} did not end within {timeout} s ({len(items)} items read)")
