"""Events: new once, updates only for what a subscriber acts on, end exactly once; and which pictures go."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import jsonschema
import numpy as np
import pytest
from event_messages import FRAME, frame, tracked, valid
from pydantic import ValidationError

from edge_runtime.config.base import describe_validation_error
from edge_runtime.decoders.decoded import Detection
from edge_runtime.tracking import TrackConfig, Tracker
from edge_runtime.tracking.events import EventBatch, EventsConfig, ObjectEvents
from edge_runtime.tracking.presence import ObjectZones


def events(**config: Any) -> ObjectEvents:
    return ObjectEvents(EventsConfig.model_validate(config), "driveway")


def messages(batch: EventBatch) -> list[dict[str, Any]]:
    return list(valid("event", batch.messages))


def kinds(batches: list[EventBatch]) -> list[str]:
    return [message["type"] for batch in batches for message in messages(batch)]


def test_an_object_makes_new_then_update_then_end_each_describing_it_and_what_it_was() -> None:
    events_ = events()
    first = messages(events_.update(frame(10.0, tracked(10.0, start=10.0)), {}, FRAME))
    assert [m["type"] for m in first] == ["new"] and first[0]["before"] is None
    new = first[0]["after"]
    assert new["id"] == "10.000-1" and new["label"] == "person" and new["pipeline"] == "driveway"
    assert (new["start_time"], new["frame_time"], new["end_time"]) == (10.0, 10.0, None)
    assert new["box"] == [500.0, 300.0, 560.0, 450.0] and new["area"] == 60 * 150 and new["ratio"] == 0.4
    assert new["current_zones"] == [] and new["has_snapshot"] is True
    assert new["snapshot"] == {"frame_time": 10.0, "box": [500.0, 300.0, 560.0, 450.0], "score": 0.9, "area": 9000}

    yard = ObjectZones(current=("yard",), entered=("yard",), dwell_s={"yard": 0.0})
    update = messages(events_.update(frame(11.0, tracked(11.0, start=10.0)), {"10.000-1": yard}, FRAME))
    assert [m["type"] for m in update] == ["update"]
    assert update[0]["before"] == new and update[0]["after"]["current_zones"] == ["yard"]
    assert update[0]["after"]["zone_dwell_s"] == {"yard": 0.0}

    last = tracked(12.0, start=10.0)
    ended = events_.update(frame(17.0, ended=(last,)), {}, FRAME)
    [end] = messages(ended)
    assert end["type"] == "end" and end["before"] == update[0]["after"]
    assert (end["after"]["end_time"], end["after"]["frame_time"]) == (12.0, 17.0)  # last seen, then given up on
    assert end["after"]["current_zones"] == ["yard"]  # where it was last seen
    assert ended.released == ("10.000-1",) and len(events_) == 0


def test_an_end_is_sent_exactly_once_even_if_the_object_is_reported_ended_again() -> None:
    events_ = events()
    person = tracked(1.0)
    batches = [events_.update(frame(1.0, person), {}, FRAME)]
    batches.append(events_.update(frame(7.0, ended=(person,)), {}, FRAME))
    batches.append(events_.update(frame(8.0, ended=(person,)), {}, FRAME))
    batches.append(events_.update(frame(9.0), {}, FRAME))
    batches.append(events_.finish())
    assert kinds(batches) == ["new", "end"]


def test_an_object_no_longer_reported_without_an_end_still_ends() -> None:
    events_ = events()
    events_.update(frame(1.0, tracked(1.0)), {}, FRAME)
    assert kinds([events_.update(frame(2.0), {}, FRAME)]) == ["end"] and len(events_) == 0


def test_finish_ends_every_open_event_once() -> None:
    events_ = events()
    events_.update(frame(1.0, tracked(1.0, serial=1), tracked(1.0, serial=2, box=(0, 0, 50, 90))), {}, FRAME)
    finished = messages(events_.finish())
    assert [(m["type"], m["after"]["id"], m["after"]["end_time"]) for m in finished] == [
        ("end", "0.000-1", 1.0),
        ("end", "0.000-2", 1.0),
    ]
    assert messages(events_.finish()) == []


def test_an_unchanging_object_gets_an_update_every_heartbeat_and_no_more() -> None:
    events_ = events(heartbeat_s=60)
    times = [
        m["after"]["frame_time"]
        for t in range(0, 200)
        for m in messages(events_.update(frame(t, tracked(t)), {}, FRAME))
    ]
    assert times == [0.0, 60.0, 120.0, 180.0]


def test_a_zone_change_is_an_update_at_once_and_a_zone_held_is_not() -> None:
    events_ = events()
    events_.update(frame(0.0, tracked(0.0)), {}, FRAME)
    zones = [
        ObjectZones(),
        ObjectZones(("yard",), ("yard",), {"yard": 0.0}),
        ObjectZones(("yard",), ("yard",), {"yard": 0.2}),
        ObjectZones(("yard", "porch"), ("yard", "porch"), {"yard": 0.4, "porch": 0.0}),
        ObjectZones(("porch",), ("yard", "porch"), {"porch": 0.2}),
    ]
    told = []
    for step, where in enumerate(zones, start=1):
        time = step * 0.2
        told += [m["after"] for m in messages(events_.update(frame(time, tracked(time)), {"0.000-1": where}, FRAME))]
    assert [(m["frame_time"], m["current_zones"], m["entered_zones"]) for m in told] == [
        (0.4, ["yard"], ["yard"]),
        (0.8, ["yard", "porch"], ["yard", "porch"]),
        (1.0, ["porch"], ["yard", "porch"]),
    ]


def test_stopping_and_moving_again_are_updates() -> None:
    events_ = events()
    told = []
    for step in range(10):
        stationary = 3 <= step < 7
        told += messages(events_.update(frame(step, tracked(step, stationary=stationary)), {}, FRAME))
    assert [(m["type"], m["after"]["frame_time"], m["after"]["stationary"]) for m in told] == [
        ("new", 0.0, False),
        ("update", 3.0, True),
        ("update", 7.0, False),
    ]


def test_a_car_parked_for_ten_minutes_raises_nothing_but_heartbeats() -> None:
    """Through the real tracker: a detector's box and score jitter every frame, which must not be news."""
    rng = np.random.default_rng(7)
    tracker = Tracker(TrackConfig(stationary_after_s=10.0))
    events_ = events(heartbeat_s=60)
    told = []
    for step in range(10 * 60 * 5):  # 10 minutes at 5 fps
        time = 1000.0 + step / 5
        x, y = rng.normal(0, 2, 2)
        car = Detection("car", float(rng.uniform(0.80, 0.88)), (600 + x, 400 + y, 800 + x, 500 + y))
        told += messages(events_.update(tracker.update([car], time, FRAME), {}, FRAME))
    assert len({m["after"]["id"] for m in told}) == 1 and told[0]["type"] == "new"
    updates = [m for m in told if m["type"] == "update"]
    became_stationary = [m for m in updates if m["after"]["stationary"] != m["before"]["stationary"]]
    assert [m["after"]["stationary"] for m in became_stationary] == [True]
    settled = [m["after"]["frame_time"] for m in updates if m["after"]["frame_time"] > 1060.0]
    gaps = np.diff(settled)
    assert len(settled) >= 8 and gaps.min() >= 60.0 - 1e-6 and gaps.max() <= 60.0 + 0.2 + 1e-6
    assert len(told) <= 1 + 1 + 10 + 4  # new, stationary, heartbeats, a few better pictures early on


def test_with_required_zones_the_event_starts_on_entering_one_with_the_best_picture_from_before() -> None:
    events_ = events(required_zones=["porch"])
    outside = ObjectZones(("yard",), ("yard",), {"yard": 1.0})
    on_porch = ObjectZones(("porch",), ("yard", "porch"), {"porch": 0.0})
    first = events_.update(frame(1.0, tracked(1.0, (500, 300, 600, 500), 0.95)), {"0.000-1": outside}, FRAME)
    assert first.messages == () and [k.view.frame_time for k in first.keep] == [1.0]
    assert first.snapshots == ()
    entered = events_.update(frame(2.0, tracked(2.0, (520, 300, 600, 480), 0.7)), {"0.000-1": on_porch}, FRAME)
    [new] = messages(entered)
    assert new["type"] == "new" and new["after"]["entered_zones"] == ["yard", "porch"]
    assert entered.keep == ()  # the frame before was the better view and is still kept
    assert [(s.per_label, s.view.frame_time) for s in entered.snapshots] == [(False, 1.0), (True, 1.0)]
    assert new["after"]["snapshot"]["frame_time"] == 1.0


def test_an_object_that_never_enters_a_required_zone_makes_no_event_at_all() -> None:
    events_ = events(required_zones=["porch"])
    batches = [
        events_.update(frame(t, tracked(t)), {"0.000-1": ObjectZones(("yard",), ("yard",))}, FRAME) for t in range(5)
    ]
    batches.append(events_.update(frame(9.0, ended=(tracked(4.0),)), {}, FRAME))
    assert kinds(batches) == [] and all(b.snapshots == () for b in batches)
    assert batches[-1].released == ("0.000-1",) and len(events_) == 0  # its kept frame may go


def test_a_growing_object_sends_a_better_picture_at_most_every_five_seconds_and_its_best_at_the_end() -> None:
    events_ = events()
    sent, updates, kept = [], [], []
    for step in range(40):  # 20 s at 2 fps, the box 5 % wider and taller every frame: each frame a better view
        time = step / 2
        scale = 1.05**step
        box = (400.0, 200.0, 400.0 + 20 * scale, 200.0 + 40 * scale)
        batch = events_.update(frame(time, tracked(time, box)), {}, FRAME)
        sent += [s.view.frame_time for s in batch.snapshots if not s.per_label]
        updates += [m["after"]["frame_time"] for m in messages(batch) if m["type"] == "update"]
        kept += [k.view.frame_time for k in batch.keep]
    assert sent == [0.0, 5.0, 10.0, 15.0]
    assert updates == [5.0, 10.0, 15.0]  # each update here is for a better picture
    assert kept == [step / 2 for step in range(40)]  # the best view follows every frame while its picture waits
    end = events_.update(frame(25.0, ended=(tracked(19.5, box),)), {}, FRAME)
    [message] = messages(end)
    assert [(s.per_label, s.view.frame_time) for s in end.snapshots] == [(False, 19.5)]
    assert message["after"]["snapshot"]["frame_time"] == 19.5


def test_updates_for_other_reasons_carry_a_better_picture_no_more_often_than_every_five_seconds() -> None:
    events_ = events()
    sent, shown = [], []
    yard = ObjectZones(("yard",), ("yard",), {"yard": 0.0})
    for step in range(24):  # 12 s at 2 fps, a better view and a zone change in every frame
        time = step / 2
        scale = 1.05**step
        box = (400.0, 200.0, 400.0 + 20 * scale, 200.0 + 40 * scale)
        batch = events_.update(frame(time, tracked(time, box)), {"0.000-1": yard} if step % 2 else {}, FRAME)
        sent += [s.view.frame_time for s in batch.snapshots if not s.per_label]
        shown += [m["after"]["snapshot"]["frame_time"] for m in messages(batch)]
    assert sent == [0.0, 5.0, 10.0]
    assert shown == [0.0] * 10 + [5.0] * 10 + [10.0] * 4  # every message says which picture was sent last


def test_the_end_sends_no_picture_when_the_last_one_sent_is_still_the_best() -> None:
    events_ = events()
    events_.update(frame(0.0, tracked(0.0)), {}, FRAME)
    end = events_.update(frame(6.0, ended=(tracked(0.0),)), {}, FRAME)
    assert kinds([end]) == ["end"] and end.snapshots == () and end.released == ("0.000-1",)


def test_a_view_cut_by_the_frames_edge_or_missed_by_the_detector_never_replaces_the_best() -> None:
    events_ = events()
    events_.update(frame(0.0, tracked(0.0, (500, 300, 560, 450), 0.7)), {}, FRAME)
    at_edge = events_.update(frame(1.0, tracked(1.0, (1180, 300, 1280, 500), 0.99)), {}, FRAME)
    predicted = events_.update(frame(2.0, tracked(2.0, (500, 200, 700, 600), 0.99, seen=False)), {}, FRAME)
    inside = events_.update(frame(3.0, tracked(3.0, (500, 300, 560, 450), 0.76)), {}, FRAME)
    assert at_edge.keep == () and predicted.keep == ()
    assert [k.view.frame_time for k in inside.keep] == [3.0]


def test_the_retained_label_picture_takes_a_better_view_or_any_view_once_its_own_is_old() -> None:
    events_ = events(snapshot={"label_refresh_s": 30})
    first = events_.update(frame(0.0, tracked(0.0, score=0.9, serial=1)), {}, FRAME)
    assert [(s.event_id, s.per_label) for s in first.snapshots] == [("0.000-1", False), ("0.000-1", True)]
    worse = events_.update(frame(10.0, tracked(10.0, score=0.8, serial=2, start=10.0)), {}, FRAME)
    assert [(s.event_id, s.per_label) for s in worse.snapshots] == [("10.000-2", False)]
    newer = events_.update(frame(40.0, tracked(40.0, score=0.8, serial=3, start=40.0)), {}, FRAME)
    assert [(s.event_id, s.per_label) for s in newer.snapshots] == [("40.000-3", False), ("40.000-3", True)]


def test_labels_not_listed_make_no_events() -> None:
    events_ = events(labels=["car"])
    batch = events_.update(frame(0.0, tracked(0.0), tracked(0.0, label="car", serial=2)), {}, FRAME)
    assert [m["after"]["label"] for m in messages(batch)] == ["car"] and len(events_) == 1


def test_without_pictures_nothing_is_kept_or_sent_and_no_update_waits_for_one() -> None:
    events_ = events(snapshot={"enabled": False})
    batches = []
    for step in range(100):
        scale = 1.05**step
        batches.append(
            events_.update(
                frame(step / 5, tracked(step / 5, (400, 300, 400 + 20 * scale, 300 + 40 * scale))), {}, FRAME
            )
        )
    assert kinds(batches) == ["new"]
    assert all(b.keep == () and b.snapshots == () for b in batches)
    assert messages(batches[0])[0]["after"]["has_snapshot"] is False
    assert messages(batches[0])[0]["after"]["snapshot"] is None


def test_disabled_events_say_nothing() -> None:
    assert events(enabled=False).update(frame(0.0, tracked(0.0)), {}, FRAME) == EventBatch()


def test_a_person_walking_through_makes_one_new_and_one_end_through_the_real_tracker() -> None:
    tracker = Tracker(TrackConfig())
    events_ = events()
    told = []
    for step in range(90):  # 3 s at 10 fps walking, then gone for 6 s
        time = 100.0 + step / 10
        detections = [Detection("person", 0.9, (100 + 15 * step, 300, 160 + 15 * step, 450))] if step < 30 else []
        told += messages(events_.update(tracker.update(detections, time, FRAME), {}, FRAME))
    assert [m["type"] for m in told] == ["new", "end"]
    assert told[0]["after"]["frame_time"] == 100.1  # confirmed on its second frame
    assert told[0]["after"]["id"] == told[1]["after"]["id"]
    assert told[1]["after"]["end_time"] == pytest.approx(102.9)


def test_the_schema_refuses_what_no_event_may_say() -> None:
    events_ = events()
    [new] = messages(events_.update(frame(0.0, tracked(0.0)), {}, FRAME))
    wrong = [
        ({**new, "before": new["after"]}, "is not of type 'null'"),  # a new has nothing before it
        (
            {"type": "end", "before": new["after"], "after": new["after"]},
            "None is not of type 'number'",
        ),  # an end says when the object was last seen
        ({**new, "after": {**new["after"], "colour": "red"}}, "'colour' was unexpected"),
        ({**new, "after": {k: v for k, v in new["after"].items() if k != "top_score"}}, "'top_score' is a required"),
    ]
    for message, problem in wrong:
        with pytest.raises(jsonschema.ValidationError, match=problem):
            valid("event", message)


def test_bad_events_config_names_the_field() -> None:
    def problems(data: dict[str, Any]) -> str:
        with pytest.raises(ValidationError) as caught:
            EventsConfig.model_validate(data)
        return "\n".join(describe_validation_error(caught.value))

    assert problems({"labels": ["person", "person"]}) == "labels: labels listed twice: person"
    assert problems({"required_zones": [""]}) == "required_zones: a zone must not be empty"
    assert problems({"heartbeat_s": 0}).startswith("heartbeat_s: ")
    assert problems({"snapshot": {"quality": 0}}).startswith("snapshot.quality: ")
    assert problems({"snapshot": {"heigth": 300}}) == "snapshot.heigth: unknown field"
    defaults = EventsConfig()
    assert (defaults.heartbeat_s, defaults.snapshot.height, defaults.snapshot.quality) == (60.0, 270, 70)
    assert defaults.snapshot.crop and defaults.snapshot.box and defaults.labels == defaults.required_zones == []


def test_importing_events_and_counts_loads_nothing_heavy() -> None:
    code = (
        "import sys, edge_runtime.tracking.events, edge_runtime.tracking.counts; "
        "print(sorted(m for m in ('scipy', 'PIL', 'matplotlib', 'cv2', 'torch', 'paho') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == "[]"


def test_with_a_cascade_a_newly_given_sub_label_is_an_update_and_attributes_alone_are_not() -> None:
    """What the cascade holds of the object is read at each frame: a sub-label given or changed is news to a
    subscriber; class scores that move with every attempt are carried, not told."""
    from edge_runtime.decoders.decoded import SubLabel

    held: dict[str, Any] = {"sub_label": None, "attributes": (("glasses", 0.7),)}
    events_ = ObjectEvents(EventsConfig(), "driveway", lambda _id: (held["sub_label"], held["attributes"]))
    [new] = messages(events_.update(frame(10.0, tracked(10.0, start=10.0)), {}, FRAME))
    assert new["after"]["sub_label"] is None and new["after"]["attributes"] == {"glasses": 0.7}
    held["attributes"] = (("glasses", 0.9),)
    assert messages(events_.update(frame(10.1, tracked(10.1, start=10.0)), {}, FRAME)) == []
    held["sub_label"] = SubLabel("alice", 0.91)
    [given] = messages(events_.update(frame(10.2, tracked(10.2, start=10.0)), {}, FRAME))
    assert given["type"] == "update" and given["before"]["sub_label"] is None
    assert given["after"]["sub_label"] == {"label": "alice", "score": 0.91}
    assert given["after"]["attributes"] == {"glasses": 0.9}
    assert messages(events_.update(frame(10.3, tracked(10.3, start=10.0)), {}, FRAME)) == []
    held["sub_label"] = SubLabel("bob", 0.85)
    [changed] = messages(events_.update(frame(10.4, tracked(10.4, start=10.0)), {}, FRAME))
    assert changed["after"]["sub_label"]["label"] == "bob"


def test_without_a_cascade_events_carry_no_sub_label_key() -> None:
    [new] = messages(events().update(frame(10.0, tracked(10.0, start=10.0)), {}, FRAME))
    assert "sub_label" not in new["after"] and "attributes" not in new["after"]
