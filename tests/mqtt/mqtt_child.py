"""Processes the MQTT tests kill with SIGKILL: a device that just connects, and one that publishes.

    python mqtt_child.py connect PORT DEVICE_ID
    python mqtt_child.py publish PORT DEVICE_ID SPOOL   # publishes ids 0, 1, ... forever
    python mqtt_child.py resume PORT DEVICE_ID SPOOL    # sends what the spool holds, then exits
    python mqtt_child.py spool SPOOL                    # puts ids 0, 1, ... into a bare spool

Each prints one line per milestone; "durable N" means every id <= N has been flushed to the spool.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.publisher import Publisher
from edge_runtime.mqtt.settings import MqttSettings, SpoolSettings
from edge_runtime.mqtt.spool import Spool


def say(line: str) -> None:
    print(line, flush=True)


def connection(port: str, device_id: str) -> tuple[MqttConnection, MqttSettings]:
    settings = MqttSettings(
        host="127.0.0.1", port=int(port), keepalive_s=5, spool=SpoolSettings(drain_rate=5000, max_in_flight=50)
    )
    conn = MqttConnection(settings, device_id)
    conn.start()
    return conn, settings


def connect(port: str, device_id: str) -> None:
    conn, _ = connection(port, device_id)
    if conn.wait_connected(10):
        say("connected")
    time.sleep(3600)


def publish(port: str, device_id: str, spool_path: str) -> None:
    conn, settings = connection(port, device_id)
    spool = Spool(Path(spool_path))
    publisher = Publisher(conn, spool, settings.spool)
    publisher.start()
    conn.wait_connected(10)
    say("connected")
    i = 0
    while True:
        publisher.publish(f"edge/{device_id}/results", b"%d" % i)
        if i % 20 == 19:
            publisher.flush()
            say(f"durable {i}")
            time.sleep(0.005)
        i += 1


def resume(port: str, device_id: str, spool_path: str) -> None:
    conn, settings = connection(port, device_id)
    spool = Spool(Path(spool_path))
    say(f"backlog {spool.depth.count}")
    publisher = Publisher(conn, spool, settings.spool)
    publisher.start()
    drained = publisher.drain(20)
    publisher.close()
    conn.stop()
    spool.close()
    say(f"drained {drained}")


def spool_only(spool_path: str) -> None:
    spool = Spool(Path(spool_path))
    i = 0
    while True:
        spool.put("edge/box/results", b"%d" % i)
        if i % 10 == 9:
            spool.flush()
            say(f"durable {i}")
        i += 1


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    {"connect": connect, "publish": publish, "resume": resume, "spool": spool_only}[mode](*args)
