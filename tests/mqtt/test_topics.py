"""Every topic the box uses, from the prefix and the device id."""

from __future__ import annotations

from edge_runtime.mqtt.topics import Topics, shared


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
