"""Retained counts: zeros before any frame, only changes per frame, the whole state for every reconnect."""

from __future__ import annotations

from collections.abc import Sequence

from event_messages import frame, tracked, valid

from edge_runtime.mqtt.topics import Topics
from edge_runtime.tracking.counts import (
    ALL,
    CrossingMessage,
    LineTotalsState,
    ObjectCount,
    PresenceCounts,
    RetainedState,
    ZoneOccupancy,
)
from edge_runtime.tracking.presence import Crossing, LineTotals, ObjectZones

TOPICS = Topics("edge", "gate-3")
YARD = ObjectZones(("yard",), ("yard",), {"yard": 1.0})


def counts() -> PresenceCounts:
    return PresenceCounts(
        ["person", "car"], started_at=1000.0, zones={"yard": [], "drive": ["car"]}, lines={"gate": ["person"]}
    )


def published(states: Sequence[RetainedState | CrossingMessage]) -> dict[str, bytes]:
    """Each state as the broker would hold it: topic to payload, every JSON payload checked on the way."""
    seen = {}
    for state in states:
        if isinstance(state, LineTotalsState):
            valid("totals", state.message)
        if isinstance(state, CrossingMessage):
            valid("crossing", state.message)
        topic = state.topic(TOPICS, "cam")
        assert topic not in seen, f"{topic} twice in one batch"
        seen[topic] = state.payload()
    return seen


def test_before_any_frame_every_configured_count_is_zero_every_zone_off_and_every_line_at_zero() -> None:
    state = published(counts().full_state())
    assert state == {
        "edge/gate-3/cam/count/person": b"0",
        "edge/gate-3/cam/count/car": b"0",
        "edge/gate-3/cam/count/all": b"0",
        "edge/gate-3/cam/zone/yard/count/person": b"0",
        "edge/gate-3/cam/zone/yard/count/car": b"0",
        "edge/gate-3/cam/zone/yard/count/all": b"0",
        "edge/gate-3/cam/zone/yard/occupied": b"OFF",
        "edge/gate-3/cam/zone/drive/count/car": b"0",
        "edge/gate-3/cam/zone/drive/count/all": b"0",
        "edge/gate-3/cam/zone/drive/occupied": b"OFF",
        "edge/gate-3/cam/line/gate/totals": b'{"in":0,"out":0,"by_label":{"person":{"in":0,"out":0}},"since":1000.0}',
    }
    assert all(state.retain for state in counts().full_state())


def test_a_frame_publishes_only_what_it_changed() -> None:
    presence = counts()
    person = tracked(1.0)
    arrived = published(presence.update(frame(1.0, person), {person.id: YARD}).retained)
    assert arrived == {
        "edge/gate-3/cam/count/person": b"1",
        "edge/gate-3/cam/count/all": b"1",
        "edge/gate-3/cam/zone/yard/count/person": b"1",
        "edge/gate-3/cam/zone/yard/count/all": b"1",
        "edge/gate-3/cam/zone/yard/occupied": b"ON",
    }
    assert presence.update(frame(1.2, tracked(1.2)), {person.id: YARD}).retained == ()  # still there: no news
    left_zone = published(presence.update(frame(1.4, tracked(1.4)), {}).retained)
    assert left_zone == {
        "edge/gate-3/cam/zone/yard/count/person": b"0",
        "edge/gate-3/cam/zone/yard/count/all": b"0",
        "edge/gate-3/cam/zone/yard/occupied": b"OFF",
    }
    gone = published(presence.update(frame(7.0, ended=(person,)), {}).retained)
    assert gone == {"edge/gate-3/cam/count/person": b"0", "edge/gate-3/cam/count/all": b"0"}


def test_the_full_state_after_a_reconnect_is_what_is_there_now() -> None:
    presence = counts()
    people = [tracked(1.0, serial=n) for n in (1, 2)]
    car = tracked(1.0, (800, 400, 1000, 500), label="car", serial=3)
    presence.update(frame(1.0, *people, car), {people[0].id: YARD, car.id: ObjectZones(("drive",), ("drive",))})
    state = published(presence.full_state())
    assert state["edge/gate-3/cam/count/person"] == b"2" and state["edge/gate-3/cam/count/all"] == b"3"
    assert state["edge/gate-3/cam/zone/yard/count/all"] == b"1" and state["edge/gate-3/cam/zone/yard/occupied"] == b"ON"
    assert state["edge/gate-3/cam/zone/drive/count/car"] == b"1" and len(state) == 11


def test_a_zone_counts_only_its_labels() -> None:
    presence = counts()
    person = tracked(1.0)
    changed = published(presence.update(frame(1.0, person), {person.id: ObjectZones(("drive",), ("drive",))}).retained)
    assert not any("/zone/drive/" in topic for topic in changed)


def test_a_label_met_that_was_not_configured_joins_the_counts_and_stays_in_the_full_state() -> None:
    presence = counts()
    dog = tracked(1.0, label="dog")
    changed = published(presence.update(frame(1.0, dog), {dog.id: YARD}).retained)
    assert changed["edge/gate-3/cam/count/dog"] == b"1" and changed["edge/gate-3/cam/zone/yard/count/dog"] == b"1"
    assert "edge/gate-3/cam/zone/drive/count/dog" not in changed  # the drive counts cars only
    presence.update(frame(9.0, ended=(dog,)), {})
    state = published(presence.full_state())
    assert state["edge/gate-3/cam/count/dog"] == b"0" and state["edge/gate-3/cam/zone/yard/count/dog"] == b"0"


def test_crossings_are_sent_once_each_and_totals_when_they_change() -> None:
    presence = counts()
    crossing = Crossing("gate", "in", "0.000-1", "person", 2.5)
    totals = LineTotals(since=1000.0, inbound=1, by_label={"person": {"in": 1, "out": 0}})
    change = presence.update(frame(2.5, tracked(2.5)), {}, [crossing], {"gate": totals})
    [message] = change.crossings
    assert not message.retain and message.topic(TOPICS, "cam") == "edge/gate-3/cam/line/gate"
    crossed = b'{"line":"gate","direction":"in","track_id":"0.000-1","label":"person","time":2.5}'
    assert published(change.crossings) == {"edge/gate-3/cam/line/gate": crossed}
    assert published(change.retained)["edge/gate-3/cam/line/gate/totals"] == (
        b'{"in":1,"out":0,"by_label":{"person":{"in":1,"out":0}},"since":1000.0}'
    )
    again = presence.update(frame(2.7, tracked(2.7)), {}, [], {"gate": totals})
    assert again == presence.update(frame(2.9, tracked(2.9)), {}) and again.crossings == again.retained == ()
    reset = presence.update(frame(3.0, tracked(3.0)), {}, [], {"gate": LineTotals(since=3.0)})
    assert published(reset.retained) == {
        "edge/gate-3/cam/line/gate/totals": b'{"in":0,"out":0,"by_label":{"person":{"in":0,"out":0}},"since":3.0}'
    }


def test_the_states_name_their_topics_and_say_what_they_hold() -> None:
    assert ObjectCount(ALL, 3, "yard").topic(TOPICS, "cam") == "edge/gate-3/cam/zone/yard/count/all"
    assert ObjectCount("car", 2).payload() == b"2"
    assert ZoneOccupancy("yard", True).payload() == b"ON" and ZoneOccupancy("yard", False).payload() == b"OFF"
