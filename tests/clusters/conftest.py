"""Real three-node broker clusters, started once per test session (each node takes seconds to boot)."""

from __future__ import annotations

import pytest
from nats_cluster import nats_cluster
from rabbitmq_cluster import rabbitmq_cluster

__all__ = ["nats_cluster", "pytest_collection_modifyitems", "rabbitmq_cluster"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The fleet tests run last: they leave the session's RabbitMQ cluster holding a thousand client ids in
    its MQTT plugin's Raft log, which a node rebooted afterwards must replay before it takes connections
    again (minutes on two cores), and the other tests reboot nodes."""
    here = [index for index, item in enumerate(items) if item.path.parent.name == "clusters"]
    ordered = sorted((items[index] for index in here), key=lambda item: item.path.name == "test_fleet_scale.py")
    for index, item in zip(here, ordered, strict=True):
        items[index] = item
