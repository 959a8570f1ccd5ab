"""The HTTP endpoint's connections under hostile clients: idle and slow ones are closed, a flood of them pushes
out the oldest waiting one instead of taking health and real clients down, and the loop's own errors are
logged once with a count, never as a traceback each."""

from __future__ import annotations

import asyncio
import http.client
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from edge_runtime.serving.connections import quiet_loop_errors
from edge_runtime.serving.service import Serving

StartServing = Callable[..., Serving]


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """How long until the server closed `sock` (None if it was still open after `seconds`)."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(1024):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def health(port: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/v2/health/live")
        return connection.getresponse().status
    finally:
        connection.close()


@pytest.fixture
def serving(start_serving: StartServing, batch_classifier: Path) -> Serving:
    return start_serving(
        [{"name": "classifier", "path": str(batch_classifier)}], header_timeout_s=0.5, max_connections=20
    )


def test_a_connection_that_never_sends_a_request_is_closed(serving: Serving) -> None:
    assert serving.port is not None
    with socket.create_connection(("127.0.0.1", serving.port)) as sock:
        took = closed_within(sock, 5)
    assert took is not None and took < 2, took


def test_headers_sent_a_byte_at_a_time_are_cut_off_at_the_deadline(serving: Serving) -> None:
    assert serving.port is not None
    request = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    with socket.create_connection(("127.0.0.1", serving.port)) as sock:
        started = time.monotonic()
        try:
            for byte in request:
                sock.sendall(bytes([byte]))
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass
        took = closed_within(sock, 5)
    assert took is not None and time.monotonic() - started < 3


def test_a_kept_alive_connection_gets_the_same_deadline_for_its_next_request(serving: Serving) -> None:
    assert serving.port is not None
    with socket.create_connection(("127.0.0.1", serving.port)) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        response = http.client.HTTPResponse(sock)
        response.begin()
        assert response.status == 200 and response.read() == b'{"live":true}'
        took = closed_within(sock, 3)  # uvicorn's own keep-alive wait is 5 s
    assert took is not None and took < 2, took


def test_a_flood_of_idle_connections_pushes_out_the_oldest_and_health_stays_answered(
    start_serving: StartServing, batch_classifier: Path
) -> None:
    """A header deadline long enough that only pushing out can close a connection within the test."""
    serving = start_serving([{"name": "classifier", "path": str(batch_classifier)}], header_timeout_s=30,
                            max_connections=20)  # fmt: skip
    assert serving.port is not None
    flood = [socket.create_connection(("127.0.0.1", serving.port)) for _ in range(60)]
    try:
        time.sleep(0.2)
        assert health(serving.port) == 200
        assert serving.connections is not None
        assert serving.connections.closed_waiting == 41  # 60 + the probe's connection, 20 kept
        still_open = sum(closed_within(sock, 0.01) is None for sock in flood[-10:])
        assert still_open == 10  # the newest stay: the oldest were pushed out
    finally:
        for sock in flood:
            sock.close()


def test_the_loops_own_errors_are_one_line_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="edge_runtime.serving")
    loop = asyncio.new_event_loop()
    try:
        quiet_loop_errors(loop)
        for _ in range(500):
            error = OSError(24, "Too many open files")
            loop.call_exception_handler({"message": "socket.accept() out of system resource", "exception": error})
    finally:
        loop.close()
    assert [r.getMessage() for r in caplog.records] == [
        "HTTP endpoint: socket.accept() out of system resource ([Errno 24] Too many open files)"
    ]
    assert caplog.records[0].exc_info is None
