"""What the HTTP stack alone costs a request: uvicorn's parsers and event loops, and granian, side by side.

A Starlette route that reads the body, views it as float32 and answers 4 KB, as an inference route does
without the inference, served in these configurations, each in its own process:

    h11             uvicorn, asyncio's event loop, h11's pure-Python HTTP parser (uvicorn's fallback)
    httptools       uvicorn, asyncio's event loop, httptools' C parser (llhttp, as in Node.js)
    uvloop          uvicorn, uvloop's event loop (libuv), httptools' parser
    granian         granian (HTTP/1 in Rust, hyper and tokio) through its ASGI interface, one worker,
                    one runtime thread, on asyncio's event loop
    granian-uvloop  the same on uvloop's event loop

The daemon's endpoint runs uvicorn with httptools (uvicorn takes it whenever it is installed, and it is
a dependency) on asyncio's loop; granian is what a switch would be measured against. Every side runs in
the serving bench's venv (see serving_harness.venv_python), which has uvloop and granian, neither of
which the project installs; the versions of both venvs' HTTP packages are printed, so that a difference
from what the endpoint runs on shows.

One client sends one request at a time over a kept-alive connection, a binary tensor body of the size
a request for a 224×224×3 fp32 input has (602 KB) or another `--kib`. Sides alternate, in reversed
order every other round; medians of each round's median, and the rounds in brackets; beside them the
server's CPU time per request (every process of its session, from /proc), median of rounds.

    python bench/serving_http_stack.py [--rounds 7] [--requests 300] [--kib 588] [--sides ...]
"""

from __future__ import annotations

import argparse
import http.client
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
UVICORN = {"h11": ("h11", "asyncio"), "httptools": ("httptools", "asyncio"), "uvloop": ("httptools", "uvloop")}
GRANIAN = {"granian": "asyncio", "granian-uvloop": "uvloop"}
SIDES = (*UVICORN, *GRANIAN)
VERSIONS = """
from importlib.metadata import PackageNotFoundError, version
def known(name):
    try:
        return version(name)
    except PackageNotFoundError:
        return "-"
print(", ".join(f"{n} {known(n)}" for n in ("uvicorn", "starlette", "h11", "httptools", "uvloop", "granian")))
"""


def application() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def infer(request: Request) -> Response:
        tensor = np.frombuffer(await request.body(), dtype=np.float32)
        return Response(tensor[:1000].tobytes(), media_type="application/octet-stream")

    return Starlette(routes=[Route("/infer", infer, methods=["POST"])])


def serve(side: str, port: int) -> None:
    if side in UVICORN:
        import uvicorn

        parser, loop = UVICORN[side]
        uvicorn.run(application(), host="127.0.0.1", port=port, http=parser, loop=loop, log_level="warning",  # type: ignore[arg-type]
                    access_log=False)  # fmt: skip
        return
    from granian.server import Server  # type: ignore[import-not-found, unused-ignore]

    Server("serving_http_stack:application", address="127.0.0.1", port=port, interface="asgi", factory=True,
           workers=1, runtime_threads=1, loop=GRANIAN[side], http="1", websockets=False, log_level="warning",
           working_dir=BENCH).serve()  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"no server on port {port} after {timeout} s")


def one_at_a_time(port: int, body: bytes, count: int, session: int) -> tuple[float, float]:
    """Median milliseconds per request after a warm-up, and the server's CPU milliseconds per request."""
    from serving_harness import session_cpu_seconds

    connection = http.client.HTTPConnection("127.0.0.1", port)
    times = []
    for index in range(count + 30):
        if index == 30:
            cpu = session_cpu_seconds(session)
        started = time.perf_counter()
        connection.request("POST", "/infer", body, {"Content-Type": "application/octet-stream"})
        answer = connection.getresponse()
        answer.read()
        if answer.status != 200:
            raise SystemExit(f"the server on port {port} answered {answer.status}")
        if index >= 30:
            times.append(time.perf_counter() - started)
    connection.close()
    return statistics.median(times) * 1000, (session_cpu_seconds(session) - cpu) / count * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--kib", type=int, default=588, help="request body size (588 KiB = 224×224×3 float32)")
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    parser.add_argument("--serve", choices=SIDES, help=argparse.SUPPRESS)  # in the server's own process
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    sys.path.insert(0, str(BENCH))
    from serving_harness import venv_python

    for python in (sys.executable, str(venv_python())):
        print(f"{python}: {subprocess.run([python, '-c', VERSIONS], capture_output=True, text=True).stdout.strip()}")
    body = np.random.default_rng(0).random(args.kib * 256, dtype=np.float32).tobytes()
    ports, servers = {}, {}
    for side in args.sides:
        ports[side] = free_port()
        command = [str(venv_python()), __file__, "--serve", side, "--port", str(ports[side])]
        servers[side] = subprocess.Popen(command, start_new_session=True)
    try:
        for port in ports.values():
            wait_listening(port)
        rounds: dict[str, list[tuple[float, float]]] = {side: [] for side in args.sides}
        for number in range(args.rounds):
            for side in args.sides if number % 2 == 0 else list(reversed(args.sides)):
                rounds[side].append(one_at_a_time(ports[side], body, args.requests, servers[side].pid))
    finally:
        for server in servers.values():
            server.terminate()
            server.wait(10)
    medians = {side: statistics.median(ms for ms, _ in values) for side, values in rounds.items()}
    base = medians[args.sides[0]]
    print(f"{len(body)} byte requests, one at a time, {args.requests} per round, {args.rounds} rounds")
    for side, values in rounds.items():
        spread = " ".join(f"{ms:.3f}" for ms, _ in values)
        cpu = statistics.median(cpu for _, cpu in values)
        print(f"{side:15s} {medians[side]:.3f} ms  ({spread})  {base / medians[side]:.2f}× {args.sides[0]}'s speed, "
              f"server CPU {cpu:.3f} ms/request")  # fmt: skip


if __name__ == "__main__":
    main()
