"""Real three-node broker clusters, started once per test session (each node takes seconds to boot)."""

from __future__ import annotations

from nats_cluster import nats_cluster
from rabbitmq_cluster import rabbitmq_cluster

__all__ = ["nats_cluster", "rabbitmq_cluster"]
