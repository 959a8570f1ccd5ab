"""Every topic the box uses, from the prefix and the device id."""

from __future__ import annotations

import pytest

from edge_runtime.mqtt.topics import ALL_LABELS, MAX_NAME_LENGTH, Topics, check_topic_name, shared, topic_level


def test_every_topic_hangs_below_prefix_and_device() -> None:
    topics = Topics("site-7/edge", "gate-3")
    assert topics.status == "site-7/edge/gate-3/status"
    assert topics.stats == "site-7/edge/gate-3/stats"
    assert topics.result("faces") == "site-7/edge/gate-3/faces/result"
    assert topics.snapshot("faces") == "site-7/edge/gate-3/faces/snapshot"
    assert topics.mask("lanes") == "site-7/edge/gate-3/lanes/mask"


def test_the_fleet_topic_stands_beside_the_boxes_and_is_taken_through_a_share_group() -> None:
    topics = Topics("site-7/edge", "gate-3")
    assert topics.fleet_infer("faces") == "site-7/edge/fleet/infer/faces"
    assert shared("line-3", topics.fleet_infer("+")) == "$share/line-3/site-7/edge/fleet/infer/+"


def test_tracking_topics_hang_below_the_pipeline() -> None:
    topics = Topics("edge", "gate-3")
    assert topics.events("drive") == "edge/gate-3/drive/events"
    assert topics.event_snapshot("drive", "1700000000.250-7") == "edge/gate-3/drive/events/1700000000.250-7/snapshot"
    assert topics.label_snapshot("drive", "person") == "edge/gate-3/drive/person/snapshot"
    assert topics.count("drive", "traffic light") == "edge/gate-3/drive/count/traffic light"
    assert topics.count("drive", ALL_LABELS) == "edge/gate-3/drive/count/all"
    assert topics.zone_count("drive", "yard", "car") == "edge/gate-3/drive/zone/yard/count/car"
    assert topics.zone_occupied("drive", "yard") == "edge/gate-3/drive/zone/yard/occupied"
    assert topics.line_crossing("drive", "gate") == "edge/gate-3/drive/line/gate"
    assert topics.line_totals("drive", "gate") == "edge/gate-3/drive/line/gate/totals"
    assert topics.pipeline("drive") == "edge/gate-3/drive" and topics.result("drive").startswith("edge/gate-3/drive/")


def test_a_name_that_cannot_stand_as_one_topic_level_is_refused_with_the_reason() -> None:
    topics = Topics("edge", "gate-3")
    with pytest.raises(ValueError, match=r"'person/cyclist' cannot stand as one MQTT topic level: it contains '/'"):
        topics.count("drive", "person/cyclist")
    with pytest.raises(ValueError, match=r"it contains '#', '\+'"):
        topics.zone_occupied("drive", "yard+#")
    with pytest.raises(ValueError, match="may not be empty"):
        topics.line_totals("drive", "")
    assert topic_level("front door") == "front door"


@pytest.mark.parametrize("name", ["yard", "front_yard", "gate-2", "Einfahrt", "é", "n" * MAX_NAME_LENGTH])
def test_plain_names_a_user_gives_are_topic_levels(name: str) -> None:
    assert check_topic_name(name, "zone") == name
    assert check_topic_name(name) == name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a\tb", "contains '\\t'"),
        ("a\x00b", "contains '\\x00'"),
        ("a/b+c", "contains '+', '/'"),
        ("$SYS", "starts with '$', which brokers reserve"),
        ("n" * (MAX_NAME_LENGTH + 1), f"is {MAX_NAME_LENGTH + 1} characters long; at most {MAX_NAME_LENGTH}"),
    ],
)
def test_a_name_a_user_gives_is_refused_with_what_it_is_and_why(name: str, expected: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_topic_name(name, "line")
    assert expected in str(caught.value) and str(caught.value).startswith(f"line name {name!r}")
    with pytest.raises(ValueError) as plain:
        check_topic_name(name)
    assert expected in str(plain.value) and str(plain.value).startswith(repr(name))


def test_an_empty_name_is_refused_by_what_it_is_for() -> None:
    with pytest.raises(ValueError, match=r"^a zone name must not be empty$"):
        check_topic_name("", "zone")
    with pytest.raises(ValueError, match=r"^must not be empty$"):
        check_topic_name("")


def test_a_model_s_label_keeps_the_plain_rule_of_the_topic_builders() -> None:
    """A space is a valid topic level for a label from the model, never for a name the user gives."""
    assert topic_level("traffic light") == "traffic light"
    with pytest.raises(ValueError, match="cannot be an MQTT topic level: it contains ' '"):
        check_topic_name("traffic light")
