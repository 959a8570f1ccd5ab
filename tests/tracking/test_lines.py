"""Lines: a crossing is a move through the segment that settles on the other side; flickers, moves
beside the segment's ends and unsettled sides count nothing; totals per label, resets, and config mistakes."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from standing import FRAME, standing

from edge_runtime.config.base import describe_validation_error
from edge_runtime.tracking.lines import LineConfig, Lines, check_line_names
from edge_runtime.tracking.objects import TrackUpdate
from edge_runtime.tracking.presence import Crossing, LineTotals

GATE = [(0.2, 0.5), (0.8, 0.5)]  # drawn left to right across the middle: right (in) is below
ABOVE, BELOW = 0.45, 0.55


def lines_of(started_at: float = 0.0, **configs: dict[str, Any]) -> Lines:
    return Lines({name: LineConfig.model_validate(config) for name, config in configs.items()}, started_at)


def gate(**overrides: Any) -> Lines:
    return lines_of(gate={"points": GATE, "inbound": "right", **overrides})


def walk(
    lines: Lines, places: list[tuple[float, float]], object_id: str = "a", label: str = "person", start: float = 0.0
) -> list[tuple[Crossing, ...]]:
    """One object standing at each (x, y) in turn, a frame a second from `start`; each frame's crossings."""
    return [
        lines.update([standing(object_id, x, y, label)], [], start + index, FRAME)
        for index, (x, y) in enumerate(places)
    ]


def down(*ys: float, x: float = 0.5) -> list[tuple[float, float]]:
    return [(x, y) for y in ys]


def test_a_crossing_is_counted_once_at_the_frame_that_settled_it_in_the_inbound_direction() -> None:
    lines = gate()
    frames = walk(lines, down(0.3, 0.35, 0.4, 0.6, 0.65, 0.7, 0.75))
    assert [len(crossings) for crossings in frames] == [0, 0, 0, 0, 1, 0, 0]
    assert frames[4] == (Crossing("gate", "in", "a", "person", 4.0),)
    assert lines.totals()["gate"] == LineTotals(0.0, 1, 0, {"person": {"in": 1, "out": 0}})


def test_a_box_flickering_across_the_line_counts_nothing() -> None:
    lines = gate()
    frames = walk(lines, down(ABOVE, ABOVE, ABOVE, BELOW, ABOVE, ABOVE, ABOVE))  # A,A,A,B,A,A,A
    assert all(crossings == () for crossings in frames)
    frames = walk(lines, down(BELOW, ABOVE, BELOW, ABOVE, BELOW, ABOVE), start=10.0)  # never two on a side
    assert all(crossings == () for crossings in frames)
    assert lines.totals()["gate"].inbound == lines.totals()["gate"].outbound == 0


def test_a_jump_over_the_line_between_two_frames_counts_one() -> None:
    lines = gate()
    frames = walk(lines, down(0.1, 0.1, 0.95, 0.95))
    assert [crossing.direction for crossings in frames for crossing in crossings] == ["in"]


def test_passing_beside_the_end_of_the_segment_counts_nothing() -> None:
    lines = gate()
    beside = walk(lines, down(0.3, 0.3, 0.7, 0.7, 0.3, 0.3, x=0.9))  # x 0.9, past the end at 0.8
    assert all(crossings == () for crossings in beside)
    # A jump that crosses the line's extension at x 0.85 and lands below the segment is no crossing either.
    jump = walk(lines, [(0.95, 0.3), (0.95, 0.3), (0.75, 0.7), (0.75, 0.7), (0.75, 0.8)], object_id="b")
    assert all(crossings == () for crossings in jump)
    # From there, going back up through the segment is a crossing: out.
    back = walk(lines, [(0.75, 0.3), (0.75, 0.3)], object_id="b", start=10.0)
    assert back[-1] == (Crossing("gate", "out", "b", "person", 11.0),)


def test_the_move_that_settles_the_side_must_be_the_one_through_the_segment() -> None:
    lines = gate()
    # Through the segment onto B, back onto A, round the end onto B, and B held: no crossing.
    places = [(0.5, 0.3), (0.5, 0.3), (0.5, 0.7), (0.5, 0.3), (0.9, 0.3), (0.9, 0.7), (0.9, 0.75), (0.9, 0.8)]
    assert all(crossings == () for crossings in walk(lines, places))
    # And the other way round: round the end onto B, back onto A, through the segment onto B, held.
    places = [(0.9, 0.3), (0.9, 0.3), (0.9, 0.7), (0.9, 0.3), (0.5, 0.3), (0.5, 0.7), (0.5, 0.75)]
    frames = walk(lines, places, object_id="b")
    assert [len(crossings) for crossings in frames] == [0, 0, 0, 0, 0, 0, 1]


def test_a_return_through_the_line_before_settling_and_then_a_settled_crossing_counts_one() -> None:
    lines = gate()
    frames = walk(lines, down(0.3, 0.3, 0.3, 0.7, 0.3, 0.7, 0.7, 0.7))  # A,A,A,B,A,B,B,B
    assert [len(crossings) for crossings in frames] == [0, 0, 0, 0, 0, 0, 1, 0]


def test_crossing_back_counts_one_out_and_each_real_crossing_counts() -> None:
    lines = gate()
    frames = walk(lines, down(0.3, 0.3, 0.7, 0.7, 0.3, 0.3, 0.7, 0.7))
    directions = [crossing.direction for crossings in frames for crossing in crossings]
    assert directions == ["in", "out", "in"]
    assert lines.totals()["gate"] == LineTotals(0.0, 2, 1, {"person": {"in": 2, "out": 1}})


def test_the_old_side_must_have_been_held_too() -> None:
    lines = gate()
    assert all(crossings == () for crossings in walk(lines, down(0.3, 0.7, 0.7, 0.7)))  # one frame above only
    lines = gate(hold_frames=1)
    frames = walk(lines, down(0.3, 0.7, 0.3))
    assert [[crossing.direction for crossing in crossings] for crossings in frames] == [[], ["in"], ["out"]]


def test_a_bottom_centre_exactly_on_the_line_is_on_neither_side() -> None:
    lines = gate()
    # A, A, on, on, B, B: the frames on the line neither count as B nor break the run on A.
    frames = walk(lines, down(0.3, 0.3, 0.5, 0.5, 0.7, 0.7))
    assert [len(crossings) for crossings in frames] == [0, 0, 0, 0, 0, 1]
    # B, on, B settles B after the move from above: a run is not broken by a frame on the line.
    frames = walk(lines, down(0.3, 0.3, 0.7, 0.5, 0.7), object_id="b")
    assert [len(crossings) for crossings in frames] == [0, 0, 0, 0, 1]
    # Onto the line's extension, then below: the move leaves the line beside the segment, no crossing.
    frames = walk(lines, [(0.9, 0.3), (0.9, 0.3), (0.9, 0.5), (0.7, 0.7), (0.7, 0.7)], object_id="c")
    assert all(crossings == () for crossings in frames)
    # Onto the segment itself, then below: counted.
    frames = walk(lines, [(0.5, 0.3), (0.5, 0.3), (0.6, 0.5), (0.9, 0.7), (0.9, 0.7)], object_id="d")
    assert [len(crossings) for crossings in frames] == [0, 0, 0, 0, 1]


def test_sides_are_as_seen_looking_from_start_to_end_on_the_image() -> None:
    # Drawn from top to bottom, looking down the image: right is the image's left (x below 0.5).
    lines = lines_of(door={"points": [(0.5, 0.2), (0.5, 0.8)], "inbound": "right", "hold_frames": 1})
    frames = walk(lines, [(0.7, 0.5), (0.3, 0.5), (0.7, 0.5)])
    assert [[crossing.direction for crossing in crossings] for crossings in frames] == [[], ["in"], ["out"]]
    # The same walk across the gate drawn the other way round, or with inbound left, swaps the directions.
    reversed_gate = lines_of(gate={"points": GATE[::-1], "inbound": "right", "hold_frames": 1})
    left_gate = lines_of(gate={"points": GATE, "inbound": "left", "hold_frames": 1})
    for lines in (reversed_gate, left_gate):
        frames = walk(lines, down(0.3, 0.7))
        assert [crossing.direction for crossings in frames for crossing in crossings] == ["out"]


def test_totals_are_kept_per_label_and_a_line_counts_only_its_labels() -> None:
    road = {"points": GATE, "inbound": "left", "labels": ["car"]}
    lines = lines_of(gate={"points": GATE, "inbound": "right"}, road=road)
    objects = [("p1", "person"), ("p2", "person"), ("c1", "car")]
    for index, y in enumerate((0.3, 0.3, 0.7, 0.7)):
        found = lines.update([standing(name, 0.5, y, label) for name, label in objects], [], float(index), FRAME)
    assert sorted((crossing.line, crossing.track_id) for crossing in found) == [
        ("gate", "c1"),
        ("gate", "p1"),
        ("gate", "p2"),
        ("road", "c1"),
    ]
    totals = lines.totals()
    assert totals["gate"] == LineTotals(0.0, 3, 0, {"person": {"in": 2, "out": 0}, "car": {"in": 1, "out": 0}})
    assert totals["road"] == LineTotals(0.0, 0, 1, {"car": {"in": 0, "out": 1}})


def test_reset_starts_the_counters_again_and_keeps_objects_halfway_across() -> None:
    lines = gate()
    walk(lines, down(0.3, 0.3, 0.7, 0.7, 0.3, 0.3))
    assert (lines.totals()["gate"].inbound, lines.totals()["gate"].outbound) == (1, 1)
    walk(lines, down(0.7), start=6.0)  # one frame below: not settled yet
    lines.reset(6.5)
    assert lines.totals() == {"gate": LineTotals(6.5, 0, 0, {})}
    frames = walk(lines, down(0.7), start=7.0)
    assert frames == [(Crossing("gate", "in", "a", "person", 7.0),)]
    assert lines.totals()["gate"] == LineTotals(6.5, 1, 0, {"person": {"in": 1, "out": 0}})


def test_totals_handed_out_do_not_change_afterwards() -> None:
    lines = gate()
    before = lines.totals()
    walk(lines, down(0.3, 0.3, 0.7, 0.7))
    assert before["gate"] == LineTotals(0.0, 0, 0, {})
    after = lines.totals()
    walk(lines, down(0.3, 0.3), start=4.0)
    assert after["gate"].by_label == {"person": {"in": 1, "out": 0}}


def test_an_ended_object_is_forgotten_and_a_new_one_starts_clean() -> None:
    lines = gate()
    walk(lines, down(0.3, 0.3))  # above, settled
    assert len(lines) == 1
    assert lines.update_from(TrackUpdate(2.0, (), (standing("a", 0.5, 0.3),)), FRAME) == ()
    assert len(lines) == 0
    # The freed row must not lend its settled side to the next object, which was above for one frame only.
    frames = walk(lines, down(0.3, 0.7, 0.7), object_id="b", start=3.0)
    assert all(crossings == () for crossings in frames)
    assert lines.totals()["gate"].inbound == 0


def test_a_timestamp_going_backwards_counts_as_the_previous_one() -> None:
    lines = gate()
    walk(lines, down(0.3, 0.3, 0.7), start=10.0)
    assert lines.update([standing("a", 0.5, 0.7)], [], 5.0, FRAME)[0].time == 12.0


def problems(config: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        LineConfig.model_validate(config)
    return "\n".join(describe_validation_error(caught.value))


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"points": [[0.3, 0.6], [0.3, 0.6]], "inbound": "left"}, "points: start and end are the same point"),
        ({"points": [[0.3, 0.6]], "inbound": "left"}, "points: has 1 points; a line needs exactly 2"),
        ({"points": [[0.1, 0.6], [0.5, 0.6], [0.9, 0.6]], "inbound": "left"}, "has 3 points; a line needs exactly 2"),
        ({"points": [[0.3, 0.6], [1.3, 0.6]], "inbound": "left"}, "points: the line has points outside the frame"),
        ({"points": [[0.3, 0.6], [1.3, 0.6]], "inbound": "left"}, "outside the frame: [(1.3, 0.6)]"),
        ({"points": GATE}, "inbound: Field required"),
        ({"points": GATE, "inbound": "north"}, "inbound: Input should be 'left' or 'right'"),
        ({"points": GATE, "inbound": "left", "hold_frames": 0}, "hold_frames: Input should be greater than or equal"),
        ({"points": GATE, "inbound": "left", "labels": [""]}, "labels: a label must not be empty"),
    ],
)
def test_config_mistakes_are_said_plainly_at_their_field(config: dict[str, Any], expected: str) -> None:
    assert expected in problems(config)


def test_line_names_must_be_mqtt_topic_levels() -> None:
    config = LineConfig.model_validate({"points": GATE, "inbound": "left"})
    with pytest.raises(ValueError, match=r"line name 'gate/in' cannot be an MQTT topic level: it contains '/'"):
        check_line_names({"gate/in": config})
    with pytest.raises(ValueError, match=r"line name '\$gate' starts with '\$'"):
        Lines({"$gate": config}, 0.0)
    assert check_line_names({"gate": config}) == {"gate": config}
