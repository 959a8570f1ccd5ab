"""The load generator of `serving.py`, in a process of its own: one JSON command per stdin line, one JSON answer.

Open loop: arrivals are a Poisson process at the offered rate, and every request is sent at its
scheduled time whether or not earlier ones were answered, so a server that falls behind sees the queue
grow, as it would with independent clients. A request's latency runs from its scheduled time, not from
when it left, so that time the generator itself fell behind is charged too (no coordinated omission).
Latencies go into an HdrHistogram (microseconds, 3 significant digits). Requests scheduled during the
warm-up are sent but not counted.

    {"op": "http", "url": ..., "body": <file>, "headers": {...}, "rate": 80, "seconds": 4, "warmup": 1}
    {"op": "mqtt", "port": 1883, "topic": ..., "body": <file>, "content_type": "image/jpeg", "rate": ...}
    {"op": "one_at_a_time", "url": ..., "body": <file>, "headers": {...}, "count": 300, "warmup": 30}
    {"op": "settle", "url": ..., "body": <file>, "headers": {...}, "within_ms": 60, "timeout_s": 60}
    {"op": "mqtt_settle", "port": 1883, "topic": ..., "body": <file>, "content_type": ..., "within_ms": 60, ...}
    {"op": "in_process", "xml": <OpenVINO IR>, "rate": ..., "seconds": 4, "warmup": 1}

`in_process` is the bound a server is measured against: the same open loop, with no server, no HTTP and
no second process, each request started on OpenVINO's AsyncInferQueue (the throughput hint, its optimal
number of infer requests, the IR as exported) at its scheduled time, or as soon as a request comes free.
It is what an ideal server would achieve on this box under the same arrivals and the same bound.

With `"abort_ms": 50`, a probe stops as soon as more than 1% of the requests it is to count came back
late, failed, or are still unanswered past the bound: its verdict is known, and an overloaded server
would otherwise take the drain time to answer or time out what it was sent. Each answer holds sent,
ok, errors, the rate the schedule sent at over the measured window (`sent_rate`: a Poisson schedule's
count over a few seconds strays from the offered rate by several percent), the achieved rate (answers
counted per second of the measured window, stretched to the last answer when the server falls behind),
latency percentiles in ms, the answers counted with the warm-up's (`ok_all`, what the server's CPU time
went to), and the generator's own CPU seconds (`client_cpu_s`), since it shares the machine's cores
with the server.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from hdrh.histogram import HdrHistogram  # type: ignore[import-not-found, unused-ignore]

DRAIN_S = 5.0  # how long an answer is awaited
PERCENTILES = (50, 90, 99, 99.9)


class Tally:
    """What a measured window produced."""

    def __init__(self) -> None:
        self.histogram = HdrHistogram(1, 120_000_000, 3)
        self.sent = 0
        self.ok = 0
        self.ok_all = 0  # answered 200, the warm-up's requests included: what the server's CPU time was spent on
        self.errors: Counter[str] = Counter()
        self.last_answer = 0.0
        self.late = 0  # errors and answers later than the bound
        self.aborted = False

    def answered(self, scheduled: float, now: float, error: str | None, bound_s: float = float("inf")) -> None:
        if error is not None:
            self.errors[error] += 1
            self.late += 1
            return
        self.late += now - scheduled > bound_s
        self.ok += 1
        self.last_answer = max(self.last_answer, now)
        self.histogram.record_value(max(1, int((now - scheduled) * 1e6)))

    def summary(self, rate: float, window_start: float, window_end: float, cpu_s: float) -> dict[str, Any]:
        span = max(window_end, self.last_answer) - window_start
        result: dict[str, Any] = {
            "offered": rate,
            "sent": self.sent,
            "sent_rate": self.sent / (window_end - window_start),
            "ok": self.ok,
            "ok_all": self.ok_all,
            "errors": dict(self.errors),
            "aborted": self.aborted,
            "achieved": self.ok / span if span > 0 else 0.0,
            "client_cpu_s": cpu_s,
        }
        for p in PERCENTILES:
            result[f"p{p:g}"] = self.histogram.get_value_at_percentile(p) / 1000 if self.ok else None
        return result


def schedule(rate: float, seconds: float, warmup: float, seed: int) -> list[float]:
    """Poisson arrival times, offsets from the start, over warm-up and window."""
    rng = random.Random(seed)
    times, t = [], 0.0
    while (t := t + rng.expovariate(rate)) < warmup + seconds:
        times.append(t)
    return times


async def http_open_loop(command: dict[str, Any]) -> dict[str, Any]:
    body = Path(command["body"]).read_bytes()
    headers, url = command["headers"], command["url"]
    rate, seconds, warmup = command["rate"], command["seconds"], command["warmup"]
    bound_s = command.get("abort_ms", float("inf")) / 1000
    tally = Tally()
    loop = asyncio.get_running_loop()
    connector = aiohttp.TCPConnector(limit=1024)
    timeout = aiohttp.ClientTimeout(total=DRAIN_S)
    cpu = time.process_time()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        inflight: dict[int, float] = {}  # counted requests awaiting their answer, by index

        async def one(index: int, scheduled: float, counted: bool) -> None:
            error = None
            try:
                async with session.post(url, data=body, headers=headers) as answer:
                    await answer.read()
                    if answer.status != 200:
                        error = f"HTTP {answer.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError) as failure:
                error = type(failure).__name__
            tally.ok_all += error is None
            if counted:
                inflight.pop(index, None)
                tally.answered(scheduled, loop.time(), error, bound_s)

        def overdue() -> int:
            oldest = loop.time() - bound_s
            return sum(1 for scheduled in inflight.values() if scheduled < oldest)

        start = loop.time() + 0.05
        tasks = []
        allowed = 0.01 * rate * seconds
        for index, offset in enumerate(schedule(rate, seconds, warmup, command.get("seed", 0))):
            if tally.late > allowed or (index % 32 == 0 and tally.late + overdue() > allowed):
                tally.aborted = True
                break
            delay = start + offset - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            counted = offset >= warmup
            tally.sent += counted
            if counted:
                inflight[index] = start + offset
            tasks.append(asyncio.ensure_future(one(index, start + offset, counted)))
        if tally.aborted:
            for task in tasks:
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return tally.summary(rate, start + warmup, start + warmup + seconds, time.process_time() - cpu)


async def one_at_a_time(command: dict[str, Any]) -> dict[str, Any]:
    """Closed loop, concurrency 1: each request leaves when the previous answer has arrived."""
    body = Path(command["body"]).read_bytes()
    latencies = []
    async with aiohttp.ClientSession() as session:
        for index in range(command["warmup"] + command["count"]):
            started = time.perf_counter()
            async with session.post(command["url"], data=body, headers=command["headers"]) as answer:
                await answer.read()
                if answer.status != 200:
                    raise SystemExit(f"HTTP {answer.status}: {await answer.text()}")
            if index >= command["warmup"]:
                latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()
    return {"median": statistics.median(latencies), "p90": latencies[int(0.9 * len(latencies))]}


async def settle(command: dict[str, Any]) -> dict[str, Any]:
    """Wait until the server answers single requests within `within_ms` again, three in a row: a server
    without admission control still works off what an overloaded probe left queued, which would be
    charged to the next probe."""
    body = Path(command["body"]).read_bytes()
    started = time.perf_counter()
    in_a_row = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=command["timeout_s"])) as session:
        while in_a_row < 3 and time.perf_counter() - started < command["timeout_s"]:
            sent = time.perf_counter()
            try:
                async with session.post(command["url"], data=body, headers=command["headers"]) as answer:
                    await answer.read()
                    fine = answer.status == 200 and (time.perf_counter() - sent) * 1000 <= command["within_ms"]
            except (aiohttp.ClientError, asyncio.TimeoutError):
                fine = False
            in_a_row = in_a_row + 1 if fine else 0
            if not fine:
                await asyncio.sleep(0.2)
    return {"settled": in_a_row >= 3, "waited_s": time.perf_counter() - started}


_compiled: dict[str, Any] = {}  # IR path -> (compiled model, an input), kept between probes


def in_process_open_loop(command: dict[str, Any]) -> dict[str, Any]:
    """The open loop straight into OpenVINO's AsyncInferQueue, in this process (see the module docstring)."""
    import numpy as np
    import openvino as ov

    if command["xml"] not in _compiled:
        core = ov.Core()
        compiled = core.compile_model(
            command["xml"], "CPU", {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_PRECISION_HINT": "f32"}
        )
        shape = [int(d) for d in compiled.inputs[0].get_shape()]
        _compiled[command["xml"]] = (compiled, np.random.default_rng(0).random(shape, dtype=np.float32))
    compiled, array = _compiled[command["xml"]]
    rate, seconds, warmup = command["rate"], command["seconds"], command["warmup"]
    bound_s = command.get("abort_ms", float("inf")) / 1000
    queue = ov.AsyncInferQueue(compiled, int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
    tally = Tally()
    lock = threading.Lock()

    def finished(_request: Any, scheduled_counted: tuple[float, bool]) -> None:
        now = time.perf_counter()
        scheduled, counted = scheduled_counted
        with lock:
            tally.ok_all += 1
            if counted:
                tally.answered(scheduled, now, None, bound_s)

    queue.set_callback(finished)
    cpu = time.process_time()
    start = time.perf_counter() + 0.05
    for offset in schedule(rate, seconds, warmup, command.get("seed", 0)):
        if tally.late > 0.01 * rate * seconds:
            tally.aborted = True
            break
        delay = start + offset - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        counted = offset >= warmup
        tally.sent += counted
        queue.start_async([array], (start + offset, counted))  # waits for a free infer request, if none is
    queue.wait_all()
    return tally.summary(rate, start + warmup, start + warmup + seconds, time.process_time() - cpu)


def mqtt_settle(command: dict[str, Any]) -> dict[str, Any]:
    """`settle` over MQTT: after an overload the requests wait in the broker, not at the server's door, and
    the server works them off (answering to reply topics nobody reads) before it sees the next probe's."""
    single = command | {"rate": 1000.0, "seconds": 0.001, "warmup": 0.0}
    started = time.perf_counter()
    in_a_row = 0
    while in_a_row < 3 and time.perf_counter() - started < command["timeout_s"]:
        answer = mqtt_open_loop(single | {"one": True, "seed": in_a_row})
        fine = answer["ok"] == 1 and answer["p50"] is not None and answer["p50"] <= command["within_ms"]
        in_a_row = in_a_row + 1 if fine else 0
        if not fine:
            time.sleep(0.2)
    return {"settled": in_a_row >= 3, "waited_s": time.perf_counter() - started}


def mqtt_open_loop(command: dict[str, Any]) -> dict[str, Any]:
    """The same open loop over MQTT 5: Response Topic and Correlation Data name where each answer goes."""
    import paho.mqtt.client as paho
    from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    body = Path(command["body"]).read_bytes()
    rate, seconds, warmup = command["rate"], command["seconds"], command["warmup"]
    bound_s = command.get("abort_ms", float("inf")) / 1000
    reply_topic = f"bench/replies/{random.getrandbits(32):08x}"
    tally = Tally()
    scheduled: dict[int, tuple[float, bool]] = {}
    lock = threading.Lock()
    all_answered = threading.Event()
    expected = [0]

    def on_message(_client: Any, _userdata: Any, message: Any) -> None:
        now = time.perf_counter()
        index = int.from_bytes(message.properties.CorrelationData, "big")
        payload = message.payload
        error = None if b'"error"' not in payload[:200] else "error reply"
        with lock:
            when, counted = scheduled.pop(index)
            if counted:
                tally.answered(when, now, error, bound_s)
            expected[0] -= 1
            if expected[0] == 0:
                all_answered.set()

    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=MQTTProtocolVersion.MQTTv5)
    client.on_message = on_message
    client.connect("127.0.0.1", command["port"])
    # As edge_runtime's own connection does: paho leaves Nagle's algorithm on, and a small packet (a PUBACK)
    # held back behind a delayed ACK costs an answer 40 ms.
    client.socket().setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.subscribe(reply_topic, 1)
    client.loop_start()
    time.sleep(0.2)
    cpu = time.process_time()
    times = [0.0] if command.get("one") else schedule(rate, seconds, warmup, command.get("seed", 0))
    expected[0] = len(times)
    start = time.perf_counter() + 0.05
    for index, offset in enumerate(times):
        if tally.late > 0.01 * rate * seconds:
            tally.aborted = True
            with lock:
                expected[0] -= len(times) - index
                if expected[0] <= 0:
                    all_answered.set()
            break
        delay = start + offset - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call, unused-ignore]
        properties.ResponseTopic = reply_topic
        properties.CorrelationData = index.to_bytes(4, "big")
        properties.ContentType = command["content_type"]
        counted = offset >= warmup
        with lock:
            scheduled[index] = (start + offset, counted)
            tally.sent += counted
        client.publish(command["topic"], body, qos=1, properties=properties)
    all_answered.wait(0.5 if tally.aborted else DRAIN_S)
    client.disconnect()
    client.loop_stop()
    with lock:
        if not tally.aborted:
            tally.errors["no answer"] += sum(counted for _, counted in scheduled.values())
    return tally.summary(rate, start + warmup, start + warmup + seconds, time.process_time() - cpu)


def main() -> None:
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "http":
            answer = asyncio.run(http_open_loop(command))
        elif command["op"] == "settle":
            answer = asyncio.run(settle(command))
        elif command["op"] == "one_at_a_time":
            answer = asyncio.run(one_at_a_time(command))
        elif command["op"] == "mqtt_settle":
            answer = mqtt_settle(command)
        elif command["op"] == "in_process":
            answer = in_process_open_loop(command)
        elif command["op"] == "mqtt":
            answer = mqtt_open_loop(command)
        else:
            raise SystemExit(f"unknown op {command['op']!r}")
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
