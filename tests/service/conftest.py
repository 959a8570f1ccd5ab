"""A real AF_UNIX datagram socket standing in for systemd's notification socket."""

from __future__ import annotations

import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

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
