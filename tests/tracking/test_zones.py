"""Zones: entering and leaving by the bottom centre with inertia, loitering and dwell in capture time,
per-zone labels, occupancy, several zones at once, ended objects freed, and the config's mistakes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError
from standing import FRAME, standing

from edge_runtime.config.base import describe_validation_error
from edge_runtime.tracking.objects import TrackedObject, TrackUpdate
from edge_runtime.tracking.zones import ZoneConfig, ZoneReport, Zones, check_zone_names

LOWER_HALF = [(0.1, 0.5), (0.9, 0.5), (0.9, 1.0), (0.1, 1.0)]  # the ground in front of the camera
LEFT_PART = [(0.0, 0.0), (0.4, 0.0), (0.4, 1.0), (0.0, 1.0)]
INSIDE, OUTSIDE = 0.8, 0.3  # y of a bottom centre in and out of LOWER_HALF (x 0.5)


def zones_of(**configs: dict[str, Any]) -> Zones:
    return Zones({name: ZoneConfig.model_validate(config) for name, config in configs.items()})


def walk(zones: Zones, steps: list[tuple[float, float]], object_id: str = "a", label: str = "person") -> ZoneReport:
    """Feed one object standing at y (x 0.5) at each capture time; the last frame's report."""
    report = None
    for time, y in steps:
        report = zones.update([standing(object_id, 0.5, y, label)], [], time, FRAME)
    assert report is not None
    return report


def current(report: ZoneReport, object_id: str = "a") -> tuple[str, ...]:
    return report.objects[object_id].current


def test_an_object_enters_after_inertia_frames_in_a_row_however_far_apart_they_are() -> None:
    zones = zones_of(yard={"polygon": LOWER_HALF, "inertia": 3})
    assert current(walk(zones, [(0.0, OUTSIDE), (0.1, INSIDE), (7.5, INSIDE)])) == ()  # 2 frames, 7 s
    report = walk(zones, [(7.52, INSIDE)])  # the third frame, 20 ms later
    assert current(report) == ("yard",)
    assert report.objects["a"].dwell_s["yard"] == pytest.approx(7.42)  # from the first of the three frames
    assert report.occupancy == {"yard": {"person": 1}}


def test_a_frame_outside_before_inertia_is_reached_starts_the_count_again() -> None:
    # Frigate lets the count decay by one per frame outside; in a row means in a row: 1, 2, 0, 1, 2.
    zones = zones_of(yard={"polygon": LOWER_HALF, "inertia": 3})
    report = walk(zones, [(0.0, INSIDE), (0.1, INSIDE), (0.2, OUTSIDE), (0.3, INSIDE), (0.4, INSIDE)])
    assert current(report) == ()
    report = walk(zones, [(0.5, INSIDE)])
    assert current(report) == ("yard",)
    assert report.objects["a"].dwell_s["yard"] == pytest.approx(0.2)  # since 0.3, not since 0.0


def test_loitering_is_measured_in_capture_time_not_in_frames() -> None:
    zones = zones_of(gate={"polygon": LOWER_HALF, "inertia": 1, "loitering_s": 10.0})
    many_frames = [(index * 0.05, INSIDE) for index in range(199)]  # 199 frames over 9.9 s
    assert current(walk(zones, many_frames)) == ()
    report = walk(zones, [(10.0, INSIDE)])
    assert current(report) == ("gate",)
    assert report.objects["a"].dwell_s == {"gate": pytest.approx(10.0)}

    few_frames = [(20.0, INSIDE), (29.99, INSIDE), (30.0, INSIDE)]  # three frames over 10 s
    reports = [walk(zones, [step], object_id="b") for step in few_frames]
    assert [current(report, "b") for report in reports] == [(), (), ("gate",)]


def test_a_loiterer_is_not_reset_by_a_flicker_shorter_than_inertia() -> None:
    zones = zones_of(gate={"polygon": LOWER_HALF, "inertia": 2, "loitering_s": 5.0})
    steps = [(0.0, INSIDE), (1.0, INSIDE), (2.0, OUTSIDE), (3.0, INSIDE), (4.0, INSIDE), (5.0, INSIDE)]
    report = walk(zones, steps)
    assert current(report) == ("gate",)
    assert report.objects["a"].dwell_s["gate"] == pytest.approx(5.0)


def test_an_object_leaves_after_inertia_frames_outside_and_a_shorter_flicker_keeps_it_in() -> None:
    zones = zones_of(yard={"polygon": LOWER_HALF, "inertia": 3})
    walk(zones, [(0.0, INSIDE), (1.0, INSIDE), (2.0, INSIDE)])
    report = walk(zones, [(3.0, OUTSIDE), (4.0, OUTSIDE), (5.0, INSIDE)])  # two frames out, then back
    assert current(report) == ("yard",)
    assert report.objects["a"].dwell_s["yard"] == pytest.approx(5.0)  # the stay was not interrupted
    report = walk(zones, [(6.0, OUTSIDE), (7.0, OUTSIDE)])
    assert current(report) == ("yard",)
    report = walk(zones, [(8.0, OUTSIDE)])
    assert current(report) == ()
    assert report.objects["a"].entered == ("yard",)  # entered stays for the object's whole life
    assert report.occupancy == {"yard": {}}


def test_dwell_is_capture_time_since_arrival_with_irregular_intervals() -> None:
    zones = zones_of(yard={"polygon": LOWER_HALF, "inertia": 2})
    times = [100.0, 100.3, 101.9, 102.0, 106.25]
    dwell = [walk(zones, [(time, INSIDE)]).objects["a"].dwell_s.get("yard") for time in times]
    assert dwell == [None, pytest.approx(0.3), pytest.approx(1.9), pytest.approx(2.0), pytest.approx(6.25)]


def test_a_timestamp_going_backwards_counts_as_the_previous_one() -> None:
    zones = zones_of(yard={"polygon": LOWER_HALF, "inertia": 1})
    walk(zones, [(10.0, INSIDE), (12.0, INSIDE)])
    assert walk(zones, [(11.0, INSIDE)]).objects["a"].dwell_s["yard"] == pytest.approx(2.0)


def test_a_zone_takes_only_its_labels_and_counts_occupancy_per_label() -> None:
    zones = zones_of(driveway={"polygon": LOWER_HALF, "labels": ["car"], "inertia": 1}, yard={"polygon": LOWER_HALF})
    person, cars = (
        standing("p", 0.5, INSIDE, "person"),
        [standing("c1", 0.3, INSIDE, "car"), standing("c2", 0.6, 0.9, "car")],
    )
    objects = [person, *cars]
    report = None
    for time in (0.0, 1.0, 2.0):
        report = zones.update(objects, [], time, FRAME)
    assert report is not None
    assert report.objects["p"].current == ("yard",)
    assert report.objects["c1"].current == ("driveway", "yard")
    assert report.occupancy == {"driveway": {"car": 2}, "yard": {"person": 1, "car": 2}}


def test_several_zones_at_once_current_in_config_order_entered_in_order_of_entry() -> None:
    # Walking from the right into the overlap of both zones: the lower half first, then the left part too.
    zones = zones_of(left={"polygon": LEFT_PART, "inertia": 1}, lower={"polygon": LOWER_HALF, "inertia": 1})
    places = [(0.8, 0.8), (0.3, 0.8), (0.3, 0.2), (0.8, 0.2)]
    reports = [zones.update([standing("a", x, y)], [], float(time), FRAME) for time, (x, y) in enumerate(places)]
    assert [report.objects["a"].current for report in reports] == [("lower",), ("left", "lower"), ("left",), ()]
    assert reports[1].objects["a"].entered == ("lower", "left")
    assert reports[-1].objects["a"].entered == ("lower", "left")
    assert reports[1].objects["a"].dwell_s == {"left": pytest.approx(0.0), "lower": pytest.approx(1.0)}


def test_zones_entered_in_the_same_frame_are_entered_in_config_order() -> None:
    zones = zones_of(lower={"polygon": LOWER_HALF, "inertia": 2}, left={"polygon": LEFT_PART, "inertia": 2})
    report = walk(zones, [(0.0, OUTSIDE), (1.0, INSIDE), (2.0, INSIDE)])
    assert report.objects["a"].entered == ("lower",)
    for time in (3.0, 4.0):
        report = zones.update([standing("a", 0.3, 0.8)], [], time, FRAME)
    assert report.objects["a"].entered == ("lower", "left")
    other = zones.update([standing("b", 0.3, 0.8)], [], 5.0, FRAME)
    other = zones.update([standing("b", 0.3, 0.8)], [], 6.0, FRAME)
    assert other.objects["b"].entered == ("lower", "left")


def test_an_ended_object_leaves_every_zone_and_its_state_is_freed() -> None:
    zones = zones_of(yard={"polygon": LOWER_HALF, "inertia": 2})
    last = walk(zones, [(0.0, INSIDE), (1.0, INSIDE)])
    assert current(last) == ("yard",) and len(zones) == 1
    gone = standing("a", 0.5, INSIDE)
    report = zones.update_from(TrackUpdate(2.0, (), (gone,)), FRAME)
    assert report.ended == {"a": report.ended["a"]} and report.ended["a"].current == ()
    assert report.ended["a"].entered == ("yard",)
    assert report.objects == {} and report.occupancy == {"yard": {}}
    assert len(zones) == 0
    # The freed row goes to the next object, which must earn its way in like any other.
    assert current(walk(zones, [(3.0, INSIDE)], object_id="b"), "b") == ()
    assert current(walk(zones, [(4.0, INSIDE)], object_id="b"), "b") == ("yard",)
    assert walk(zones, [(4.5, INSIDE)], object_id="b").objects["b"].entered == ("yard",)
    # Nor does an object that ended halfway in hand its count to the next.
    walk(zones, [(5.0, INSIDE)], object_id="c")
    zones.update([], [standing("c", 0.5, INSIDE)], 6.0, FRAME)
    assert current(walk(zones, [(7.0, INSIDE)], object_id="d"), "d") == ()


def test_memory_follows_the_objects_present_over_a_long_run() -> None:
    zones = zones_of(yard={"polygon": LOWER_HALF, "inertia": 1})
    previous: list[TrackedObject] = []
    for frame in range(2000):
        present = [standing(f"{frame}-{index}", 0.5, INSIDE) for index in range(5)]  # new ids every frame
        zones.update(present, previous, float(frame), FRAME)
        previous = present
    assert len(zones) == 5
    assert len(zones._state) <= 16  # rows are reused: a few times the objects present, not 10 000


def test_objects_missing_from_a_frame_without_ending_keep_their_state() -> None:
    zones = zones_of(yard={"polygon": LOWER_HALF, "inertia": 2})
    walk(zones, [(0.0, INSIDE)])
    zones.update([standing("b", 0.5, OUTSIDE)], [], 1.0, FRAME)
    assert current(walk(zones, [(2.0, INSIDE)])) == ("yard",)


def test_without_zones_every_object_is_in_none() -> None:
    report = Zones({}).update([standing("a", 0.5, INSIDE)], [], 0.0, FRAME)
    assert report.objects["a"].current == () and report.occupancy == {}


def test_the_polygon_test_agrees_with_the_masks_one_on_concave_zones() -> None:
    from edge_runtime.tracking.filters import inside_polygon

    ell = [(0.0, 0.0), (0.5, 0.0), (0.5, 0.2), (0.2, 0.2), (0.2, 0.5), (0.0, 0.5)]
    star = [(0.5, 0.05), (0.6, 0.4), (0.95, 0.4), (0.65, 0.6), (0.8, 0.95), (0.5, 0.7), (0.2, 0.95), (0.35, 0.6)]
    zones = zones_of(ell={"polygon": ell, "inertia": 1}, star={"polygon": star, "inertia": 1})
    points = np.random.default_rng(3).uniform(0.0, 1.0, (400, 2))
    objects = [standing(str(index), float(x), float(y)) for index, (x, y) in enumerate(points)]
    report = zones.update(objects, [], 0.0, FRAME)
    feet = np.array([[(o.box[0] + o.box[2]) / 2 / FRAME[0], o.box[3] / FRAME[1]] for o in objects])
    for name, polygon in (("ell", ell), ("star", star)):
        expected = inside_polygon(feet, np.array(polygon)).tolist()
        assert [name in report.objects[str(index)].current for index in range(400)] == expected
        assert 40 < sum(expected) < 360


def problems(config: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        ZoneConfig.model_validate(config)
    return "\n".join(describe_validation_error(caught.value))


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"polygon": [[0.1, 0.1], [0.5, 0.1]]}, "polygon: has 2 points; a zone's polygon needs at least 3"),
        ({"polygon": [[0.1, 0.1], [1.2, 0.1], [0.5, 0.5]]}, "polygon: the polygon has points outside the frame"),
        ({"polygon": [[0.1, 0.1], [1.2, 0.1], [0.5, 0.5]]}, "outside the frame: [(1.2, 0.1)]"),
        ({"polygon": [[0.1, -0.1], [0.2, 0.1], [0.5, 0.5]]}, "fractions of the frame's width and height, from 0 to 1"),
        ({"polygon": [[0.1, 0.1], [0.2, 0.2], [0.3, 0.3]]}, "polygon: encloses no area: its points"),
        ({"polygon": LOWER_HALF, "inertia": 0}, "inertia: Input should be greater than or equal to 1"),
        ({"polygon": LOWER_HALF, "loitering_s": -1}, "loitering_s: Input should be greater than or equal to 0"),
        ({"polygon": LOWER_HALF, "labels": ["car", "car"]}, "labels: labels listed twice: car"),
        ({"polygon": LOWER_HALF, "objects": ["car"]}, "objects: unknown field"),
    ],
)
def test_config_mistakes_are_said_plainly_at_their_field(config: dict[str, Any], expected: str) -> None:
    assert expected in problems(config)


def test_defaults_are_frigates() -> None:
    config = ZoneConfig.model_validate({"polygon": LOWER_HALF})
    assert (config.inertia, config.loitering_s, config.labels) == (3, 0.0, [])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("front/yard", "zone name 'front/yard' cannot be an MQTT topic level: it contains '/'"),
        ("yard+", "contains '+'"),
        ("#all", "contains '#'"),
        ("front yard", "contains ' '"),
        ("$SYS", "starts with '$', which brokers reserve"),
        ("", "a zone name must not be empty"),
        ("y" * 65, "is 65 characters long; at most 64"),
    ],
)
def test_zone_names_must_be_mqtt_topic_levels(name: str, expected: str) -> None:
    config = ZoneConfig.model_validate({"polygon": LOWER_HALF})
    with pytest.raises(ValueError, match="zone name") as caught:
        check_zone_names({"yard": config, name: config})
    assert expected in str(caught.value)
    with pytest.raises(ValueError):
        Zones({name: config})
    assert check_zone_names({"front_yard-2": config}) == {"front_yard-2": config}


def test_every_bad_name_is_listed_at_once() -> None:
    config = ZoneConfig.model_validate({"polygon": LOWER_HALF})
    with pytest.raises(ValueError) as caught:
        check_zone_names({"a/b": config, "c#": config, "ok": config})
    assert "'a/b'" in str(caught.value) and "'c#'" in str(caught.value) and "'ok'" not in str(caught.value)
