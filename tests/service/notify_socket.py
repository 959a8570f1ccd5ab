"""The listening end of a notification socket, shared by the service tests."""

from __future__ import annotations

import socket
from dataclasses import dataclass


@dataclass
class NotifySocket:
    """The listening end, and the NOTIFY_SOCKET value that reaches it."""

    sock: socket.socket
    address: str

    @property
    def environ(self) -> dict[str, str]:
        return {"NOTIFY_SOCKET": self.address}

    def receive(self, timeout: float = 2.0) -> str:
        self.sock.settimeout(timeout)
        return self.sock.recv(4096).decode("utf-8")

    def drain(self) -> list[str]:
        """Every datagram waiting now, without blocking."""
        messages = []
        self.sock.setblocking(False)
        try:
            while True:
                messages.append(self.sock.recv(4096).decode("utf-8"))
        except BlockingIOError:
            return messages
        finally:
            self.sock.setblocking(True)
