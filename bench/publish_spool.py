"""Sustained QoS 1 results per second through the spool, against a naive paho publish loop.

Each run starts from an empty spool, publishes `--messages` results as fast as one producer thread can,
and stops the clock when the broker has acknowledged the last one (spool empty, nothing in flight). The
naive loop calls paho's `publish(qos=1)` for the same messages, with the same in-flight window, and waits
for the last PUBACK; it has no durability at all. Runs alternate between the two so drift of the machine
affects both alike; the table gives the median and the spread over `--runs`.

    python bench/publish_spool.py [--runs 5] [--messages 20000] [--payload 256] [--window 20] [--subscriber]

The broker is a local Mosquitto on a free loopback port (the tests' helper in tests/broker.py). Goal:
at least 5000 results/s through the spool.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.publisher import Publisher
from edge_runtime.mqtt.settings import MqttSettings, SpoolSettings
from edge_runtime.mqtt.spool import Spool

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from broker import Mosquitto  # noqa: E402

GOAL = 5000.0
TOPIC = "edge/bench-box/results"


def payloads(count: int, size: int) -> list[bytes]:
    return [(b'{"id":%d,"detections":[]' % i).ljust(size - 1, b" ") + b"}" for i in range(count)]


def through_spool(broker: Mosquitto, work: Path, messages: list[bytes], window: int) -> float:
    settings = MqttSettings(host=broker.host, port=broker.port, spool=SpoolSettings(max_in_flight=window))
    connection = MqttConnection(settings, "bench-box")
    connection.start()
    if not connection.wait_connected(5):
        raise SystemExit(f"no connection to the broker: {connection.last_error}")
    if connection.receive_maximum is not None and connection.receive_maximum < window:
        raise SystemExit(f"the broker accepts only {connection.receive_maximum} in flight; use --window <= that")
    spool = Spool(work / f"spool-{time.monotonic_ns()}.sqlite")
    publisher = Publisher(connection, spool, settings.spool)
    publisher.start()
    try:
        start = time.perf_counter()
        for payload in messages:
            publisher.publish(TOPIC, payload)
        if not publisher.drain(120):
            raise SystemExit(f"spool did not drain: {publisher.stats()}")
        elapsed = time.perf_counter() - start
        stats = publisher.stats()
        if stats.acked != len(messages):
            raise SystemExit(f"acked {stats.acked} of {len(messages)}: {stats}")
        return len(messages) / elapsed
    finally:
        publisher.close()
        connection.stop()
        spool.close()


def naive_paho(broker: Mosquitto, messages: list[bytes], max_inflight: int) -> float:
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="bench-naive", protocol=MQTTProtocolVersion.MQTTv5)
    client.max_inflight_messages_set(max_inflight)
    done = threading.Event()
    acked = 0

    def on_publish(*_: object) -> None:
        nonlocal acked
        acked += 1
        if acked == len(messages):
            done.set()

    client.on_publish = on_publish
    client.connect(broker.host, broker.port)
    client.loop_start()
    try:
        start = time.perf_counter()
        for payload in messages:
            client.publish(TOPIC, payload, qos=1)
        if not done.wait(120):
            raise SystemExit(f"naive loop: only {acked} of {len(messages)} acknowledged")
        return len(messages) / (time.perf_counter() - start)
    finally:
        client.disconnect()
        client.loop_stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--payload", type=int, default=256, help="bytes per result")
    parser.add_argument(
        "--window", type=int, default=20, help="spool max_in_flight (Mosquitto's default Receive Maximum is 20)"
    )
    parser.add_argument(
        "--subscriber",
        action="store_true",
        help="also have a subscriber in this process receive every result (its thread competes for the GIL)",
    )
    args = parser.parse_args()

    messages = payloads(args.messages, args.payload)
    with tempfile.TemporaryDirectory() as tmp, Mosquitto(Path(tmp) / "broker") as broker:
        if args.subscriber:
            broker.subscribe_collect("edge/#", qos=1)
        variants: dict[str, Callable[[], float]] = {
            f"spool + publisher (window {args.window})": lambda: through_spool(
                broker, Path(tmp), messages, args.window
            ),
            f"naive paho loop (max_inflight {args.window})": lambda: naive_paho(broker, messages, args.window),
        }
        results: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.runs):
            for name, run in variants.items():
                results[name].append(run())

    print(f"command: python bench/publish_spool.py {' '.join(sys.argv[1:])}".rstrip())
    print(
        f"{args.runs} runs x {args.messages} QoS 1 messages of {args.payload} B, local mosquitto"
        + (", one subscriber" if args.subscriber else "")
    )
    print()
    print("| variant | median msg/s | min | max |")
    print("|---|---:|---:|---:|")
    for name, rates in results.items():
        print(f"| {name} | {statistics.median(rates):,.0f} | {min(rates):,.0f} | {max(rates):,.0f} |")
    spool_median = statistics.median(next(iter(results.values())))
    verdict = "meets" if spool_median >= GOAL else "MISSES"
    print(f"\nspool median {spool_median:,.0f} msg/s {verdict} the goal of {GOAL:,.0f} msg/s")


if __name__ == "__main__":
    main()
