"""Which node of a broker cluster a box connects to next.

Given several nodes (`mqtt.hosts`, the nodes of one cluster), a box prefers the first and, whenever the
node it uses or tries is lost, moves on to the next. The nodes after the first are taken in an order
shuffled once per box (seeded by its client id): when a node dies, its boxes spread over the survivors
instead of all moving onto the node listed after it. A box does not move back to the first node while
connected elsewhere: any node of the cluster serves it, and moving costs a session start.
"""

from __future__ import annotations

import random

from edge_runtime.mqtt.settings import BrokerAddress

__all__ = ["BrokerRotation", "failover_order"]


def failover_order(brokers: list[BrokerAddress], client_id: str) -> list[BrokerAddress]:
    """The first node, then the others in an order shuffled once for this box (stable across restarts)."""
    rest = brokers[1:]
    random.Random(client_id).shuffle(rest)
    return [brokers[0], *rest]


class BrokerRotation:
    """The box's nodes in failover order, the one in use or being tried, and how often the box moved."""

    def __init__(self, brokers: list[BrokerAddress], client_id: str) -> None:
        self.order = failover_order(brokers, client_id)
        self.current = self.order[0]  # the node connected to, or being tried
        self.moves = 0  # connections to another node than the one before
        self._index = 0
        self._last_connected: BrokerAddress | None = None

    def first(self) -> BrokerAddress:
        """Start over from the preferred node (a connection being started)."""
        self._index = 0
        self.current = self.order[0]
        return self.current

    def advance(self) -> BrokerAddress | None:
        """The current node is lost: the next one to aim at, or None when there is only one node."""
        if len(self.order) == 1:
            return None
        self._index = (self._index + 1) % len(self.order)
        self.current = self.order[self._index]
        return self.current

    def connected(self) -> None:
        """A connection to the current node succeeded; counts a move when it is not the last node used."""
        if self._last_connected is not None and self.current != self._last_connected:
            self.moves += 1
        self._last_connected = self.current

    def next_attempt(self, delay: float) -> str:
        """How a log line says what happens next."""
        if len(self.order) == 1:
            return f"reconnecting in {delay:.1f} s"
        return f"trying {self.current} in {delay:.1f} s"
