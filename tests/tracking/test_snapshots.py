"""Frigate's better-picture rule, the frame's edge, and the picture each label's retained topic shows."""

from __future__ import annotations

from edge_runtime.tracking.snapshots import LabelBests, ObjectView, is_better_view, on_edge

FRAME = (1280, 720)


def view(score: float, box: tuple[float, float, float, float] = (500, 300, 600, 500), time: float = 0.0) -> ObjectView:
    return ObjectView(time, box, score)


def test_a_view_is_better_when_its_score_beats_by_more_than_five_hundredths_or_its_box_by_a_tenth() -> None:
    current = view(0.80)  # 100 x 200 px
    assert not is_better_view(current, view(0.85), FRAME)  # not more than 0.05 better
    assert is_better_view(current, view(0.86), FRAME)
    assert not is_better_view(current, view(0.80, (500, 300, 610, 500)), FRAME)  # exactly 10 % larger
    assert is_better_view(current, view(0.80, (500, 300, 611, 500)), FRAME)
    assert not is_better_view(current, view(0.60, (500, 300, 605, 505)), FRAME)  # a little larger, much less sure
    assert is_better_view(current, view(0.60, (400, 200, 700, 600)), FRAME)  # much larger wins even so


def test_a_view_cut_by_the_edge_never_replaces_a_whole_one_but_may_replace_another_cut_one() -> None:
    assert on_edge((0, 300, 100, 500), FRAME) and on_edge((1200, 600, 1280, 720), FRAME)
    assert on_edge((500, 0.5, 600, 200), FRAME) and not on_edge((2, 2, 1278, 718), FRAME)
    whole, cut = view(0.6), view(0.99, (1180, 300, 1280, 600))
    assert not is_better_view(whole, cut, FRAME)
    assert is_better_view(view(0.6, (1200, 300, 1280, 500)), cut, FRAME)
    assert is_better_view(cut, view(0.99, (500, 300, 800, 600)), FRAME)  # a whole one must still be better


def test_a_label_shows_its_first_view_then_better_ones_then_any_once_its_own_is_old() -> None:
    bests = LabelBests(refresh_s=60)
    assert bests.offer("person", view(0.8, time=0.0), FRAME)
    assert not bests.offer("person", view(0.82, time=30.0), FRAME)
    assert bests.offer("car", view(0.5, time=30.0), FRAME)  # labels are apart
    assert bests.offer("person", view(0.9, time=40.0), FRAME)
    assert not bests.offer("person", view(0.7, time=100.0), FRAME)  # 60 s old is not yet too old
    assert bests.offer("person", view(0.7, time=100.5), FRAME)
    shown = bests.shown("person")
    assert shown is not None and (shown.score, shown.frame_time) == (0.7, 100.5)


def test_a_view_message_rounds_as_result_messages_do() -> None:
    message = ObjectView(12.34567, (1.234, 2.345, 101.26, 52.35), 0.87654).message()
    assert message == {"frame_time": 12.346, "box": [1.2, 2.3, 101.3, 52.4], "score": 0.877, "area": 5002}
