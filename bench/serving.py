"""Serving: edge_runtime's endpoint against Triton, PyTriton, FastAPI and LitServe, same model files, same box.

Sides (see serving_servers.py and serving_competitors.py), each its own process on a loopback port:
- edge: edge_runtime's `Serving` (Open Inference Protocol over Starlette/uvicorn, Triton's batching rule);
- the competitors as a skilled user would deploy them on a CPU box (per-model settings in
  serving_competitors.TUNING):
  - triton-server: Triton 2.51's own server binary (shipped in PyTriton's wheel) on a model repository
    written here, a Python-backend model running the requests its dynamic batcher gathers on OpenVINO's
    AsyncInferQueue, two instances;
  - pytriton-tuned: PyTriton with its dynamic batcher gathering requests for four instances, each
    running them on an AsyncInferQueue;
  - fastapi-async: FastAPI + uvicorn (uvloop, httptools) awaiting an AsyncInferQueue from its route, the
    event loop never blocked;
  - litserve: LitServe with its batching, one worker, the gathered requests on an AsyncInferQueue;
- the basic setups: pytriton-basic (PyTriton 0.5.14 with one synchronous instance per infer request
  OpenVINO plans, batches of 8 joined for MobileNetV2, none for the face detector) and naive (FastAPI +
  uvicorn calling the compiled model once per request, the event loop blocked meanwhile);
- edge-latency (only when asked for with --sides): edge with the served model's `hint: latency`, one
  request on every core rather than one stream per core.
All load the same OpenVINO IR on the CPU at explicit fp32, under the throughput hint but for naive and
edge-latency. Where requests are gathered, they run side by side on OpenVINO's streams: on this box
batches lose for MobileNetV2, and the face detector's graph cannot be batched. Models: MobileNetV2 1.0 at
224×224 (built here with seeded weights, see models.py) and the bundled face detector. Every side is sent
the same binary tensor request (LitServe the same bytes in a multipart/form-data body, since its routes
read JSON or forms).

The load generator (serving_load.py) is a process of its own: open-loop Poisson arrivals, latencies
from each request's scheduled time into an HdrHistogram, binary tensor data. It shares the machine's
cores with the server, as on any single box, and its CPU time is reported beside the server's.
Measured per model:
- capacity: the highest offered rate that passes (p99 ≤ 50 ms, ≥ 99% answered 200, achieved ≥ 95% of
  the rate sent), searched from above (see `capacity`): round 1 from `--top` (1.5) × the model's own async
  throughput down in steps of 0.8, then two bisection steps; later rounds from 1.3 × the side's median so
  far down in steps of 0.9, then one; never below `--floor` (0.1) × the model's throughput. Every round
  restarts each side's server; sides alternate, in reversed order every other round; medians over rounds.
  After every probe the generator waits for the server to answer single requests promptly again, over
  the route just probed, so that a backlog is not charged to the next probe.
- the bound: the same search, each round beside the sides, on the model alone (serving_load's
  `in_process`: the same Poisson arrivals started on OpenVINO's async queue in one process, no HTTP). The
  model's closed-loop throughput is no rate a server can pass at: with random arrivals a queue forms
  long before the streams are always busy, and its p99 crosses the bound first. The bound is what a
  server with no cost of its own would reach, so each side's capacity is also given as a share of it.
- CPU time per request: the server's (every process of its session, from /proc, around each probe) and
  the generator's, at a fixed `--cpu-rate` (100/s) each round and at capacity; for a model under 1 ms
  per inference also the server's outside inference (less the CPU one inference costs in-process).
- p50/p99 against offered load at fractions of the model's own async throughput (round 1).
- one at a time: closed loop, concurrency 1, median latency; against the model's synchronous latency
  in-process, compiled as the servers compile it and under the latency hint.
- MQTT (when edge is among the sides): edge's MQTT 5 request/response (Response Topic, Correlation
  Data) through a Mosquitto started here with `set_tcp_nodelay true` (as docs/operating/brokers.md advises for
  request/response), against its HTTP route with the same JPEG body; capacity at the same bound,
  alternating.

Goals: edge ≥ 1.0× each Triton side's capacity, ≥ 2× the naive server's; one at a time, median ≤ the
model's synchronous latency + 1 ms. Results: bench/results/serving.json; logs of the servers:
bench/results/serving-logs/.

One-time setup, done on first use: bench/.cache/triton-venv, a venv of the base Python with
nvidia-pytriton==0.5.14 (Triton 2.51.0, its server binary and Python backend), the project's OpenVINO
version, fastapi, uvicorn[standard] (with httptools and uvloop, as FastAPI's own install instructions
bring), litserve and python-multipart, granian (for serving_http_stack.py), hdrhistogram, aiohttp and
paho-mqtt (about 1 GB). Triton's Python stub needs libpython: LD_LIBRARY_PATH is set for it.

    python bench/serving.py [--rounds 3] [--seconds 3] [--models mobilenet_v2 face] [--sides ...] [--quick]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "tests")]

from serving_harness import LoadGenerator, Model, Server, bench_models, load_average, model_alone  # noqa: E402
from serving_report import BOUND_MS, cpu_per_request, median_of, passes, report  # noqa: E402

SIDES = ("edge", "triton-server", "pytriton-tuned", "fastapi-async", "litserve", "pytriton-basic", "naive")
OPTIONAL_SIDES = ("edge-latency",)  # edge with `hint: latency`: one request on every core
IN_PROCESS = "the async queue alone, open loop"  # searched beside the sides: what an ideal server reaches
RESULTS = BENCH / "results"
Probe = Callable[[float], dict[str, Any]]


def bisect(probe: Probe, low: float, high: float, steps: int, trace: list[dict[str, Any]]) -> float:
    """The highest rate in [low, high) that passed, after `steps` probes; `low` passed already."""
    for _ in range(steps):
        rate = (low * high) ** 0.5
        trace.append(result := probe(rate))
        low, high = (rate, high) if passes(result) else (low, rate)
    return low


def capacity(
    probe: Probe,
    previous: list[float],
    ceiling: float,
    trace: list[dict[str, Any]],
    floor: float = 0.1,
    top: float = 1.5,
) -> float:
    """The highest passing rate, searched from above: down in geometric steps to the first rate that
    passes, then bisected between it and the last that failed. From above, since a side may fail at
    low load too (a fixed delay per request puts p99 over the bound whatever the rate), where a
    bisection from zero would stop at the first failing midpoint. Below `floor` × the model's own
    throughput the search gives up and says 0."""
    median = statistics.median(previous) if previous else 0.0
    if median > 0:
        rate, factor, refine = 1.3 * median, 0.9, 1
    else:
        rate, factor, refine = (0.5 * top * ceiling, 0.7, 2) if previous else (top * ceiling, 0.8, 2)
    failed = None
    while rate >= floor * ceiling:
        trace.append(result := probe(rate))
        if passes(result):
            return rate if failed is None else bisect(probe, rate, failed, refine, trace)
        failed, rate = rate, rate * factor
    return 0.0


def shown(result: dict[str, Any]) -> None:
    p50, p99 = (f"{result[p]:.1f}" if result[p] is not None else "-" for p in ("p50", "p99"))
    verdict = "pass" if passes(result) else "aborted" if result.get("aborted") else "fail"
    print(f"      {result['offered']:7.1f}/s: achieved {result['achieved']:7.1f}, p50 {p50}, p99 {p99} ms, {verdict}")


class Bench:
    def __init__(self, args: argparse.Namespace, logs: Path) -> None:
        self.args = args
        self.logs = logs
        self.load = LoadGenerator()

    def http(
        self,
        url: str,
        request: tuple[str, dict[str, str]],
        rate: float,
        seconds: float | None = None,
        abort: bool = False,
        server: Server | None = None,
    ) -> Any:
        """One open-loop probe; with `server`, the CPU time its processes spent meanwhile (`server_cpu_s`)."""
        body, headers = request
        seconds = self.args.seconds if seconds is None else seconds
        more = {"abort_ms": BOUND_MS} if abort else {}
        cpu = server.cpu_seconds() if server else 0.0
        result = self.load.run(
            op="http", url=url, body=body, headers=headers, rate=rate, seconds=seconds, warmup=1.0, **more
        )
        if server:
            result["server_cpu_s"] = server.cpu_seconds() - cpu
            result["server_cpu_ms_per_request"] = cpu_per_request(result, "server_cpu_s")
        result["client_cpu_ms_per_request"] = cpu_per_request(result, "client_cpu_s")
        self.settle(url, request)
        shown(result)
        return result

    def in_process(self, model: Model, rate: float) -> Any:
        """One open-loop probe of the model alone, on OpenVINO's async queue in the generator's process."""
        result = self.load.run(op="in_process", xml=str(model.xml), rate=rate, seconds=self.args.seconds,
                               warmup=1.0, abort_ms=BOUND_MS)  # fmt: skip
        shown(result)
        return result

    def mqtt_probe(self, url: str, port: int, topic: str, request: tuple[str, dict[str, str]], rate: float) -> Any:
        body, headers = request
        result = self.load.run(op="mqtt", port=port, topic=topic, body=body, content_type=headers["Content-Type"],
                               rate=rate, seconds=self.args.seconds, warmup=1.0, abort_ms=BOUND_MS)  # fmt: skip
        settled = self.load.run(op="mqtt_settle", port=port, topic=topic, body=body,
                                content_type=headers["Content-Type"], within_ms=2 * BOUND_MS, timeout_s=60)  # fmt: skip
        if not settled["settled"]:
            print(f"    the server did not settle over MQTT within {settled['waited_s']:.0f} s", flush=True)
        shown(result)
        return result

    def settle(self, url: str, request: tuple[str, dict[str, str]]) -> None:
        """Let the server work off what a probe left queued before the next one (see serving_load.settle)."""
        body, headers = request
        settled = self.load.run(op="settle", url=url, body=body, headers=headers, within_ms=2 * BOUND_MS, timeout_s=60)
        if not settled["settled"]:
            print(f"    the server did not settle within {settled['waited_s']:.0f} s", flush=True)

    def server(self, side: str, model: Model, mqtt_port: int | None = None) -> Server:
        return Server(side, model, self.args.delay_ms, self.logs / f"{model.name}-{side}.log", mqtt_port)

    def model(self, model: Model) -> dict[str, Any]:
        args = self.args
        alone = model_alone(model, 3.0)
        ceiling = alone["async_fps"]
        print(f"\n{model.title}: alone {alone}", flush=True)
        run = [] if args.no_http else args.sides
        sides = {s: {"capacity": [], "probes": [], "curve": [], "at_cpu_rate": []} for s in run}
        bound: dict[str, Any] = {"capacity": [], "probes": []}  # the async queue alone, under the same load
        for round_ in range(args.rounds):
            for side in [*run, IN_PROCESS] if round_ % 2 == 0 else [IN_PROCESS, *reversed(run)]:
                if side == IN_PROCESS:
                    if run:
                        print(f"  round {round_ + 1} {side} (load average {load_average():.2f})", flush=True)
                        probe = partial(self.in_process, model)
                        bound["capacity"].append(capacity(probe, bound["capacity"], ceiling, bound["probes"],
                                                          args.floor, args.top))  # fmt: skip
                        print(f"    capacity {bound['capacity'][-1]:.0f}/s", flush=True)
                    continue
                record: dict[str, Any] = sides[side]
                request = model.request_for(side)
                print(f"  round {round_ + 1} {side} (load average {load_average():.2f})", flush=True)
                server = self.server(side, model)
                try:
                    self.http(server.url, request, 0.4 * args.top * ceiling, 2.0)  # warm-up: batch shapes, JIT
                    if args.cpu_rate > 0:
                        record["at_cpu_rate"].append(self.http(server.url, request, args.cpu_rate, server=server))
                    if round_ == 0:
                        one = self.load.run(op="one_at_a_time", url=server.url, body=request[0],
                                            headers=request[1], count=args.one_count, warmup=30)  # fmt: skip
                        record["one_at_a_time_ms"] = one
                        for fraction in args.curve:
                            record["curve"].append(self.http(server.url, request, fraction * ceiling, server=server))
                    probe = partial(self.http, server.url, request, abort=True, server=server)
                    found = capacity(probe, record["capacity"], ceiling, record["probes"], args.floor, args.top)
                    record["capacity"].append(found)
                    print(f"    capacity {found:.0f}/s", flush=True)
                finally:
                    server.stop()
        for record in sides.values():
            record["median_capacity"] = statistics.median(record["capacity"])
            at_rate = [p["server_cpu_ms_per_request"] for p in record["at_cpu_rate"]]
            record["median_server_cpu_ms_at_cpu_rate"] = median_of(at_rate)
        if bound["capacity"]:
            bound["median_capacity"] = statistics.median(bound["capacity"])
        result: dict[str, Any] = {"model": model.title, "alone": alone, "max_batch_size": model.max_batch_size,
                                  "why_unbatched": model.why_unbatched, "sides": sides}  # fmt: skip
        result["in_process"] = bound
        if args.mqtt_rounds and "edge" in args.sides:
            result["mqtt"] = self.mqtt(model, ceiling)
        return result

    def mqtt(self, model: Model, ceiling: float) -> dict[str, Any]:
        """MQTT against HTTP on one edge server, the same JPEG body, capacities searched alternately."""
        from broker import Mosquitto  # type: ignore[import-not-found, unused-ignore]

        args = self.args
        body, headers = model.image_request()
        routes: dict[str, dict[str, Any]] = {}
        for side in ("edge",):
            options = ["set_tcp_nodelay true"]  # the broker answers at once too, as request/response wants
            with tempfile.TemporaryDirectory() as scratch, Mosquitto(Path(scratch), listener_options=options) as broker:
                server = self.server(side, model, broker.port)
                topic = f"edge/bench-box/infer/{model.name}"
                try:
                    self.http(server.url, (body, headers), 0.2 * args.top * ceiling, 2.0)
                    probes: dict[str, Probe] = {
                        "http": partial(self.http, server.url, (body, headers), abort=True),
                        "mqtt": partial(self.mqtt_probe, server.url, broker.port, topic, (body, headers)),
                    }
                    for route in probes:
                        routes[f"{side} {route}"] = {"capacity": [], "probes": []}
                    for round_ in range(args.mqtt_rounds):
                        for route in ("http", "mqtt") if round_ % 2 == 0 else ("mqtt", "http"):
                            record = routes[f"{side} {route}"]
                            found = capacity(
                                probes[route], record["capacity"], ceiling, record["probes"], args.floor, args.top
                            )
                            record["capacity"].append(found)
                            print(f"  MQTT part, {side}, round {round_ + 1}, {route}: {found:.0f}/s", flush=True)
                finally:
                    server.stop()
        for record in routes.values():
            record["median_capacity"] = statistics.median(record["capacity"])
        return routes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per probe (after 1 s warm-up)")
    parser.add_argument("--models", nargs="+", default=["mobilenet_v2", "face"], choices=["mobilenet_v2", "face"])
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES + OPTIONAL_SIDES)
    parser.add_argument("--delay-ms", type=float, default=2.0, help="max_queue_delay_ms, for edge and Triton")
    parser.add_argument("--curve", type=float, nargs="+", default=[0.25, 0.5, 0.75, 1.0],
                        help="offered loads, as fractions of the model's own async throughput")  # fmt: skip
    parser.add_argument("--one-count", type=int, default=200, help="requests one at a time")
    parser.add_argument("--cpu-rate", type=float, default=100.0,
                        help="each round, a probe at this rate for the CPU time per request; 0 skips it")  # fmt: skip
    parser.add_argument("--mqtt-rounds", type=int, default=2, help="0 skips the MQTT part")
    parser.add_argument("--floor", type=float, default=0.1, help="where the search gives up, × the model's throughput")
    parser.add_argument("--top", type=float, default=1.5, help="where the search starts, × the model's throughput")
    parser.add_argument("--no-http", action="store_true", help="only the MQTT part")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round, short probes, few steps")
    parser.add_argument("--json", type=Path, default=RESULTS / "serving.json")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the servers are stopped on the way out
    if args.quick:
        args.rounds, args.seconds, args.curve, args.one_count, args.mqtt_rounds = 1, 1.5, [0.5], 50, 1
    logs = RESULTS / "serving-logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    bench = Bench(args, logs)
    try:
        results = []
        for model in bench_models(args.models):
            model.write_requests()
            results.append(bench.model(model))
    finally:
        bench.load.close()
    args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=1))
    print("\n" + report(results, args.sides, args.cpu_rate))
    print(f"\n{time.monotonic() - started:.0f} s; results in {args.json}")


if __name__ == "__main__":
    main()
