"""The HTTP endpoint's connections: how many it holds, how long one may take to say what it wants.

uvicorn keeps a connection that has not sent a request yet open forever, waits as long as a client takes
to send its headers (a byte a second holds a connection for minutes), and accepts connections until the
process runs out of descriptors, when health probes and real clients are refused with everyone else.
So every connection must finish its request headers within `header_timeout_s` of opening (or of its last
answer, for a kept-alive one), and past `max_connections` a new connection pushes out the oldest one
still waiting for its headers: a flood of idle or slow connections then costs the clients that send
real requests nothing, health probes included. Only when every connection holds a request being
answered is a new one closed at once.

Errors the event loop reports by itself (an accept() that fails when descriptors run out, once per
attempt) are logged as one line per kind and minute with a count, never as a traceback each.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["ConnectionLimits", "GuardedProtocol", "guarded_protocol", "quiet_loop_errors"]

log = logging.getLogger(__name__)
_REPEAT_S = 60.0


@dataclass
class ConnectionLimits:
    max_connections: int = 512
    header_timeout_s: float = 10.0
    closed_waiting: int = 0  # connections closed for taking too long to send their headers, or pushed out
    waiting: OrderedDict[int, GuardedProtocol] = field(default_factory=OrderedDict)  # oldest first


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline and a bound on connections (`guarded_protocol`)."""

    limits: ConnectionLimits
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections and not self._push_out_oldest_waiting():
            transport.close()  # every other connection holds a request being answered
            return
        self._await_headers()

    def on_headers_complete(self) -> None:
        self._stop_waiting()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_headers()  # a kept-alive connection's next request gets the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _await_headers(self) -> None:
        self._stop_waiting()
        self._deadline = self.loop.call_later(self.limits.header_timeout_s, self._close_waiting)
        self.limits.waiting[id(self)] = self

    def _stop_waiting(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self.limits.waiting.pop(id(self), None)

    def _close_waiting(self) -> None:
        self._stop_waiting()
        self.limits.closed_waiting += 1
        self.transport.close()

    def _push_out_oldest_waiting(self) -> bool:
        oldest = next((c for c in self.limits.waiting.values() if c is not self), None)
        if oldest is None:
            return False
        oldest._close_waiting()
        return True


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedProtocol]:
    """The protocol class for uvicorn's `http` setting, sharing `limits` among the server's connections."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits})


def quiet_loop_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Log what the loop reports by itself once per kind and minute, with how often it happened meanwhile."""
    last_said: dict[str, float] = {}
    unsaid: dict[str, int] = {}

    def handle(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", "event loop error"))
        error = context.get("exception")
        kind = f"{message}: {type(error).__name__}" if error is not None else message
        now = time.monotonic()
        if now - last_said.get(kind, -_REPEAT_S) < _REPEAT_S:
            unsaid[kind] = unsaid.get(kind, 0) + 1
            return
        last_said[kind] = now
        again = unsaid.pop(kind, 0)
        log.error("HTTP endpoint: %s%s%s", message, f" ({error})" if error is not None else "",
                  f"; {again} more like it in the last minute" if again else "")  # fmt: skip

    loop.set_exception_handler(handle)
