"""Acknowledging requests once they are answered, in the order they arrived.

A connection that takes requests from a shared subscription acknowledges each one only after its
answer is published, so the broker's in-flight window (the MQTT 5 Receive Maximum the connection
asks for) bounds how many requests the box holds at any moment: a box that dies takes at most that
many unanswered requests with it. MQTT requires PUBACKs in the order the PUBLISHes arrived
[MQTT-4.6.0-2], so an answered request waits behind an older one still being worked on.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["InOrderAcks", "Settle", "settled"]

Settle = Callable[[], None]  # called once a request is answered or dropped; more calls do nothing


def settled() -> None:
    """The `Settle` of a message the client library acknowledged by itself."""


@dataclass
class _Waiting:
    mid: int
    qos: int
    settled: bool = False


class InOrderAcks:
    def __init__(self, send: Callable[[int, int], object]) -> None:
        self._send = send  # the client's ack(mid, qos)
        self._lock = threading.Lock()
        self._waiting: deque[_Waiting] = deque()
        self.last_received = 0.0  # monotonic time of the latest message, acknowledged by hand or not

    def received(self, mid: int, qos: int) -> Settle:
        """Note a message that needs acknowledging; the returned callable settles it."""
        self.last_received = time.monotonic()
        if qos == 0:
            return settled
        entry = _Waiting(mid, qos)
        with self._lock:
            self._waiting.append(entry)
        return lambda: self._settle(entry)

    def new_session(self) -> None:
        """Message ids of a session that ended mean nothing on the next one; their acks are never sent."""
        with self._lock:
            self._waiting.clear()

    @property
    def unsettled(self) -> int:
        with self._lock:
            return sum(not entry.settled for entry in self._waiting)

    def _settle(self, entry: _Waiting) -> None:
        with self._lock:  # held while sending: two threads must not interleave their runs of acks
            entry.settled = True
            while self._waiting and self._waiting[0].settled:
                head = self._waiting.popleft()
                self._send(head.mid, head.qos)
