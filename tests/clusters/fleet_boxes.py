"""A child process of the fleet test: many simulated boxes publishing results until told to stop.

Run as `python tests/clusters/fleet_boxes.py --count 250 --name p0 --hosts 127.0.0.1:1883 --spool-dir DIR`.
A thousand boxes as threads of one process would measure the GIL, not the broker; a thousand processes
would not fit two cores. So each child drives its share of the fleet with `BoxDriver`: the daemon's own
connection, spool and publisher per box, one selector loop for all of them.

Protocol with the parent, one JSON object per stdout line:

- `{"ready": N, ...}` once every box is connected (its retained "online" status is out, its Last Will set);
  `{"ready": 0, "error": ...}` and exit status 2 if they did not all connect in time.
- then each box publishes results at `--rate` per second, the first one at a random offset so the fleet's
  results do not come in bursts, until SIGTERM or a line (or end of file) on stdin;
- then it keeps driving until every spool is empty, stops each box (it says "offline" and waits for the
  broker's acknowledgement, as a stopping daemon does), and prints `{"report": {...}}`: per box how many results
  it produced, and the totals (reconnects, node moves, re-sends) the parent reports beside what its
  consumer received. Each box's ledger (when each result was acknowledged, where the box connected) goes
  to the `--ledger` file, which the parent reads only to explain a loss.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import resource
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, where simulated_boxes lives

from simulated_boxes import BoxDriver, SimulatedBox

from edge_runtime.mqtt.settings import MqttSettings
from edge_runtime.pipeline.results import FrameSize, ModelInfo, RuntimeInfo, StageLatency, build_result, encode

PIPELINE = "faces"
MODEL = ModelInfo("face_detection_short_range", "1.0.0", "fp32")
FRAME = FrameSize(640, 480)
RUNTIME = RuntimeInfo("openvino", "CPU", "FP32")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=250, help="boxes in this process")
    parser.add_argument("--name", required=True, help="device ids are fleet-<name>-<n>")
    parser.add_argument("--hosts", required=True, help="broker nodes, host:port,host:port,...")
    parser.add_argument("--protocol", choices=["5", "3.1.1"], default="5")
    parser.add_argument("--rotate-hosts", action="store_true", help="box n prefers node n mod len(hosts)")
    parser.add_argument("--rate", type=float, default=0.5, help="results per second per box")
    parser.add_argument("--spool-dir", type=Path, required=True)
    parser.add_argument("--ledger", type=Path, required=True, help="where each box's ledger is written, as JSON")
    parser.add_argument("--connect-timeout", type=float, default=120.0)
    parser.add_argument("--settle-timeout", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def settings_for(n: int, hosts: list[str], protocol: str, rotate: bool) -> MqttSettings:
    """A box's broker settings; rotating the node list spreads a fleet over a cluster as its operators
    would, by giving boxes different first nodes (the connection always prefers its first)."""
    shift = n % len(hosts) if rotate else 0
    return MqttSettings(hosts=hosts[shift:] + hosts[:shift], protocol=protocol)  # type: ignore[arg-type]


def result_message(box: SimulatedBox, index: int) -> bytes:
    now = time.time()
    message = build_result(
        device_id=box.device_id,
        pipeline=PIPELINE,
        source="camera (simulated)",
        kind="frame",
        index=index,
        frame=FRAME,
        captured_at=now - 0.03,
        published_at=now,
        model=MODEL,
        runtime=RUNTIME,
        latency=StageLatency(pre=2.0, infer=12.0, post=1.0, total=30.0),
        task="detection",
        result={"detections": [{"label": "face", "score": 0.91, "box": [120.0, 80.0, 360.0, 330.0]}]},
    )
    return encode(message)


def publish(box: SimulatedBox) -> None:
    """What `Publisher.publish` gets from a pipeline, on the pipeline's topic; `produced` is the next index."""
    box.publisher.publish(box.topics.result(PIPELINE), result_message(box, box.produced))
    box.produced += 1
    box.step_at = 0.0


def emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def watch_for_stop(stop: threading.Event) -> None:
    """SIGTERM, or a line or end of file on stdin (the parent went away) ends the publishing."""
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def read_stdin() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=read_stdin, name="stdin", daemon=True).start()


def produce_until(driver: BoxDriver, boxes: list[SimulatedBox], rate: float, stop: threading.Event, seed: int) -> None:
    period = 1.0 / rate
    rng = random.Random(seed)
    start = time.monotonic()
    due = [(start + rng.uniform(0, period), n) for n in range(len(boxes))]
    heapq.heapify(due)
    while not stop.is_set():
        driver.run_once(0.01)
        now = time.monotonic()
        while due and due[0][0] <= now:
            at, n = heapq.heappop(due)
            publish(boxes[n])
            heapq.heappush(due, (at + period, n))


def settle(driver: BoxDriver, boxes: list[SimulatedBox], timeout: float) -> bool:
    """Drive until every box's spool is empty and nothing is in flight; the spools are the truth, not paho."""
    deadline = time.monotonic() + timeout
    check_at = 0.0
    while time.monotonic() < deadline:
        driver.run_once(0.01)
        if time.monotonic() >= check_at:
            if all(box.settled for box in boxes):
                return True
            check_at = time.monotonic() + 0.2
    return False


def report(boxes: list[SimulatedBox], settled: bool, started: float, ready_s: float) -> dict[str, Any]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    stats = [box.publisher.stats() for box in boxes]
    return {
        "boxes": len(boxes),
        "produced": sum(box.produced for box in boxes),
        "per_box": {box.device_id: box.produced for box in boxes},
        "settled": settled,
        "unsettled": [box.device_id for box, s in zip(boxes, stats, strict=True) if s.spool_messages or s.in_flight],
        "spool_left": sum(s.spool_messages for s in stats),
        "connected": sum(s.connected for s in stats),
        "reconnects": sum(s.reconnects for s in stats),
        "boxes_reconnected": sum(s.reconnects > 0 for s in stats),
        "broker_moves": sum(s.broker_moves for s in stats),
        "published": sum(s.published for s in stats),  # re-sends included
        "acked": sum(s.acked for s in stats),
        "dropped": sum(s.dropped_full + s.dropped_age + s.rejected for s in stats),
        "ready_s": round(ready_s, 2),
        "wall_s": round(time.monotonic() - started, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "max_rss_kib": usage.ru_maxrss,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    stop = threading.Event()
    watch_for_stop(stop)
    hosts = args.hosts.split(",")
    args.spool_dir.mkdir(parents=True, exist_ok=True)
    boxes = [
        SimulatedBox.open(
            f"fleet-{args.name}-{n:03d}", settings_for(n, hosts, args.protocol, args.rotate_hosts), args.spool_dir
        )
        for n in range(args.count)
    ]
    driver = BoxDriver(boxes)
    driver.start()
    try:
        if not driver.run_until(lambda: all(b.connection.connected for b in boxes), args.connect_timeout):
            missing = [b.device_id for b in boxes if not b.connection.connected]
            emit(
                {"ready": 0, "error": f"{len(missing)} boxes not connected in {args.connect_timeout} s: {missing[:5]}"}
            )
            return 2
        ready_s = time.monotonic() - started
        emit({"ready": len(boxes), "ready_s": round(ready_s, 2)})
        produce_until(driver, boxes, args.rate, stop, args.seed)
        settled = settle(driver, boxes, args.settle_timeout)
        figures = report(boxes, settled, started, ready_s)
        args.ledger.write_text(json.dumps({box.device_id: box.ledger() for box in boxes}))
        driver.close()  # each box says "offline" and waits for the broker's acknowledgement, as a daemon does
        emit({"report": figures})
        return 0 if settled else 1
    finally:
        driver.close()


if __name__ == "__main__":
    sys.exit(main())
