"""What the HTTP stack alone costs a request: uvicorn's parsers and event loops side by side.

A Starlette route that reads the body, views it as float32 and answers 4 KB, as an inference route does
without the inference, served by uvicorn in three configurations, each in its own process:

    h11        asyncio's event loop, h11's pure-Python HTTP parser (uvicorn's fallback)
    httptools  asyncio's event loop, httptools' C parser (llhttp, as in Node.js)
    uvloop     uvloop's event loop (libuv), httptools' parser

The daemon's endpoint runs uvicorn with httptools (uvicorn takes it whenever it is installed, and it is
a dependency) on asyncio's loop.

One client sends one request at a time over a kept-alive connection, a binary tensor body of the size
a request for a 224×224×3 fp32 input has (602 KB) or another `--kib`. Sides alternate, in reversed
order every other round; medians of each round's median, and the rounds in brackets.

    python bench/serving_http_stack.py [--rounds 7] [--requests 300] [--kib 588]
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import socket
import statistics
import time

import numpy as np

SIDES = {"h11": ("h11", "asyncio"), "httptools": ("httptools", "asyncio"), "uvloop": ("httptools", "uvloop")}


def serve(port: int, parser: str, loop: str) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def infer(request: Request) -> Response:
        tensor = np.frombuffer(await request.body(), dtype=np.float32)
        return Response(tensor[:1000].tobytes(), media_type="application/octet-stream")

    app = Starlette(routes=[Route("/infer", infer, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, http=parser, loop=loop, log_level="warning", access_log=False)  # type: ignore[arg-type]


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


def one_at_a_time(port: int, body: bytes, count: int) -> float:
    """Median milliseconds per request, after a warm-up."""
    connection = http.client.HTTPConnection("127.0.0.1", port)
    times = []
    for index in range(count + 30):
        started = time.perf_counter()
        connection.request("POST", "/infer", body, {"Content-Type": "application/octet-stream"})
        answer = connection.getresponse()
        answer.read()
        if answer.status != 200:
            raise SystemExit(f"the server on port {port} answered {answer.status}")
        if index >= 30:
            times.append(time.perf_counter() - started)
    connection.close()
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--kib", type=int, default=588, help="request body size (588 KiB = 224×224×3 float32)")
    args = parser.parse_args()
    body = np.random.default_rng(0).random(args.kib * 256, dtype=np.float32).tobytes()
    ports, servers = {}, []
    for side, (http_parser, loop) in SIDES.items():
        ports[side] = free_port()
        server = multiprocessing.Process(target=serve, args=(ports[side], http_parser, loop), daemon=True)
        server.start()
        servers.append(server)
    for port in ports.values():
        wait_listening(port)
    rounds: dict[str, list[float]] = {side: [] for side in SIDES}
    for number in range(args.rounds):
        order = list(SIDES) if number % 2 == 0 else list(reversed(SIDES))
        for side in order:
            rounds[side].append(one_at_a_time(ports[side], body, args.requests))
    for server in servers:
        server.terminate()
    base = statistics.median(rounds["h11"])
    print(f"{len(body)} byte requests, one at a time, {args.requests} per round, {args.rounds} rounds")
    for side, values in rounds.items():
        median = statistics.median(values)
        spread = " ".join(f"{v:.3f}" for v in values)
        print(f"{side:10s} {median:.3f} ms  ({spread})  {base / median:.2f}× h11's speed")


if __name__ == "__main__":
    main()
