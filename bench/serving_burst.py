"""A burst of large bodies at the serving endpoint: what the daemon's memory does, and what each client hears.

The daemon runs as `edge-runtime run` (serve-only, HTTP, MediaPipe's face detector, default limits) from
the source tree given, so the same burst can be aimed at two versions of the code side by side. Every
client opens its own connection at once and sends a 15 MB `image/jpeg` body (random bytes: an image that
does not decode, so nothing but admission, reading and refusing is measured). /proc is sampled every
20 ms for the daemon's resident memory.

    python bench/serving_burst.py [--source DIR] [--clients 60] [--mib 15]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
PORT = 18555


def resident_mib(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) // 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0)


def start_daemon(source: Path, work: Path) -> subprocess.Popen[bytes]:
    model = {"name": "faces", "path": str(REPO / "samples/models/face_detection_short_range")}
    config = {"device_id": "burst", "state_dir": str(work / "state"), "cache_dir": str(work / "cache"),
              "mqtt": {"host": "127.0.0.1", "port": 1},
              "serve": {"mqtt": False, "http": {"port": PORT}, "models": [model]}}  # fmt: skip
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    env = dict(os.environ, PYTHONPATH=str(source))
    command = [sys.executable, "-m", "edge_runtime", "run", "--config", str(work / "config.yaml")]
    with (work / "daemon.log").open("wb") as log:
        daemon = subprocess.Popen(command, cwd=source, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", PORT), timeout=0.5).close()
            return daemon
        except OSError:
            time.sleep(0.5)
    daemon.kill()
    raise SystemExit(f"the daemon did not listen on {PORT}: see {work / 'daemon.log'}")


def burst(clients: int, body: bytes) -> tuple[collections.Counter[str], list[float]]:
    statuses: collections.Counter[str] = collections.Counter()
    took: list[float] = []
    lock = threading.Lock()
    head = (f"POST /v2/models/faces/infer HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip

    def client() -> None:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", PORT), timeout=120) as sock:
            sock.sendall(head)
            with contextlib.suppress(OSError):  # answered and closed before the whole body was sent
                sock.sendall(body)
            answer = sock.recv(200)
        with lock:
            statuses[answer.split(b" ")[1].decode() if answer else "closed"] += 1
            took.append(time.monotonic() - started)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses, sorted(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=REPO, help="the source tree whose daemon is measured")
    parser.add_argument("--clients", type=int, default=60)
    parser.add_argument("--mib", type=int, default=15)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="serving-burst-"))
    daemon = start_daemon(args.source.resolve(), work)
    try:
        time.sleep(1.0)
        before = peak = resident_mib(daemon.pid)
        sampling = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not sampling.is_set():
                peak = max(peak, resident_mib(daemon.pid))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        statuses, took = burst(args.clients, os.urandom(args.mib << 20))
        sampling.set()
        sampler.join()
        figures = {
            "source": str(args.source), "clients": args.clients, "body_mib": args.mib, "rss_before_mib": before,
            "peak_rss_mib": peak, "statuses": dict(statuses), "median_answer_s": round(took[len(took) // 2], 2),
            "slowest_answer_s": round(took[-1], 2),
        }  # fmt: skip
        print(json.dumps(figures, indent=2))
    finally:
        daemon.terminate()
        daemon.wait(30)


if __name__ == "__main__":
    main()
