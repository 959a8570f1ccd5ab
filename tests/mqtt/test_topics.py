"""Every topic the box uses, from the prefix and the device id."""

from __future__ import annotations

import pytest

from edge_runtime.mqtt.topics import ALL_LABELS, Topics, shared, topic_level


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


def test_a_name_that_cannot_stand_as_one_topic_level_is_refused_with_the_reason() -> None:
    topics = Topics("edge", "gate-3")
    with pytest.raises(ValueError, match=r"'person/cyclist' cannot stand as one MQTT topic level: it contains '/'"):
        topics.count("drive", "person/cyclist")
    with pytest.raises(ValueError, match=r"it contains '#', '\+'"):
        topics.zone_occupied("drive", "yard+#")
    with pytest.raises(ValueError, match="may not be empty"):
        topics.line_totals("drive", "")
    assert topic_level("front door") == "front door"
