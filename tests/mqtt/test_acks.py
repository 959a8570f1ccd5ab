"""PUBACKs for requests answered out of order still leave in the order the requests arrived."""

from __future__ import annotations

from edge_runtime.mqtt.acks import InOrderAcks


def test_an_answered_request_waits_for_the_older_ones_before_it_is_acknowledged() -> None:
    sent: list[tuple[int, int]] = []
    acks = InOrderAcks(lambda mid, qos: sent.append((mid, qos)))
    first, second, third = acks.received(1, 1), acks.received(2, 1), acks.received(3, 2)
    third()
    second()
    assert sent == [] and acks.unsettled == 1
    first()
    assert sent == [(1, 1), (2, 1), (3, 2)] and acks.unsettled == 0
    first()  # settling twice sends nothing more
    assert sent == [(1, 1), (2, 1), (3, 2)]


def test_qos0_needs_no_ack_and_a_new_session_forgets_the_old_ids() -> None:
    sent: list[tuple[int, int]] = []
    acks = InOrderAcks(lambda mid, qos: sent.append((mid, qos)))
    acks.received(0, 0)()
    stale = acks.received(7, 1)
    acks.new_session()
    fresh = acks.received(7, 1)
    stale()
    assert sent == []
    fresh()
    assert sent == [(7, 1)]
