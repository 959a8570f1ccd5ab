"""Refusing at start a config that asks the broker for more than it gives.

A pipeline set to QoS 2 relies on exactly-once delivery; a broker that grants at most QoS 1 (many
managed brokers, and Mosquitto's `max_qos 1`) would silently downgrade every message. The broker says
its maximum in CONNACK (MQTT 5) or by the QoS it grants a probe subscription (3.1.1), so the check waits
briefly after connecting for that answer and names every pipeline it concerns.
"""

from __future__ import annotations

import time

from edge_runtime.config import DaemonConfig
from edge_runtime.errors import ConfigError
from edge_runtime.mqtt.connection import MqttConnection

__all__ = ["refuse_qos_the_broker_lacks"]


def refuse_qos_the_broker_lacks(connection: MqttConnection, config: DaemonConfig, wait_s: float) -> None:
    """ConfigError naming the QoS 2 pipelines when the broker takes at most QoS 1 or 0; waits up to `wait_s`
    for the broker's answer, and passes when none came (the broker is away: results spool meanwhile)."""
    check = connection.qos
    if not check.wanted:
        return
    deadline = time.monotonic() + wait_s
    while check.maximum is None and connection.connected and time.monotonic() < deadline:
        time.sleep(0.01)
    if check.maximum is None or check.maximum >= 2:
        return
    fields = [
        f"pipelines[{index}].publish.qos"
        for index, pipeline in enumerate(config.pipelines)
        if pipeline.enabled and pipeline.publish.qos == 2
    ]
    raise ConfigError(
        f"{', '.join(fields)}: 2, but broker {connection.broker} takes at most QoS {check.maximum} "
        f"({check.source}); set publish.qos to 1, or use a broker with QoS 2 (docs/operating/brokers.md)"
    )
