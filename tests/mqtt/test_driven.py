"""Connections, spools and publishers driven from the caller's thread (`start(own_thread=False)`)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from broker import Mosquitto
from simulated_boxes import BoxDriver, SimulatedBox

from edge_runtime.mqtt.settings import MqttSettings


def test_forty_boxes_in_one_thread_deliver_everything_across_a_broker_restart(tmp_path: Path) -> None:
    with Mosquitto(tmp_path / "broker", persistence=True) as broker:
        watcher = broker.subscribe_collect("edge/+/sim/result", client_id="watcher")
        statuses = broker.subscribe_collect("edge/+/status", client_id="statuses")
        settings = MqttSettings(host=broker.host, port=broker.port)
        threads_before = threading.active_count()
        boxes = [SimulatedBox.open(f"box-{n}", settings, tmp_path) for n in range(40)]
        driver = BoxDriver(boxes)
        driver.start()
        try:
            assert threading.active_count() == threads_before, "no thread per box"
            while not all(box.connection.connected for box in boxes):
                driver.run_once()
            for index in range(20):
                for box in boxes:
                    box.publish_result("sim", {"index": index})
                driver.run_for(0.05)
                if index == 10:
                    broker.restart()  # SIGTERM: Mosquitto writes the watcher's queue to disk first
            assert driver.run_until(lambda: all(b.settled for b in boxes), timeout=30)
            assert all(box.connection.reconnects == 1 for box in boxes)
        finally:
            driver.close()
        # each box said "offline" and waited for the broker's acknowledgement before disconnecting
        offline = {f"edge/box-{n}/status": b"offline" for n in range(40)}
        assert statuses.wait_until(lambda m: {x.topic: x.payload for x in m} == offline, timeout=10)
        assert watcher.wait_count(800, timeout=10)
        delivered = {(m.topic, json.loads(m.payload)["index"]) for m in watcher.messages}
        assert delivered == {(f"edge/box-{n}/sim/result", i) for n in range(40) for i in range(20)}
