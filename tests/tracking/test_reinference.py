"""DeepStream's re-inference rules in seconds: a tracked object's crop runs again only when its box has grown
by the set fraction or the set time has passed, and at once when it was never attempted."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from edge_runtime.tracking.reinference import ReinferRule, ReinferSettings


def rule(area_growth: float = 0.2, interval_s: float = 1.0) -> ReinferRule:
    return ReinferRule(ReinferSettings(area_growth=area_growth, interval_s=interval_s))


def test_an_object_never_attempted_is_due_at_once() -> None:
    assert rule().due("a", 100.0, 0.0)


def test_an_unchanged_object_waits_for_the_interval_and_no_longer() -> None:
    reinfer = rule(interval_s=1.0)
    reinfer.attempted("a", 100.0, 10.0)
    assert not reinfer.due("a", 100.0, 10.0)
    assert not reinfer.due("a", 100.0, 10.999)
    assert reinfer.due("a", 100.0, 11.0)


def test_a_box_grown_by_the_fraction_is_due_before_the_interval_and_one_grown_less_is_not() -> None:
    reinfer = rule(area_growth=0.2, interval_s=60.0)
    reinfer.attempted("a", 1000.0, 0.0)
    assert not reinfer.due("a", 1199.0, 0.1)  # 19.9 % more
    assert reinfer.due("a", 1200.0, 0.1)  # 20 % more: DeepStream's REINFER_AREA_THRESHOLD
    assert not reinfer.due("a", 500.0, 0.1)  # shrinking is no reason


def test_growth_is_measured_from_the_last_attempt_not_the_first() -> None:
    reinfer = rule(area_growth=0.2, interval_s=60.0)
    reinfer.attempted("a", 1000.0, 0.0)
    reinfer.attempted("a", 1200.0, 1.0)
    assert not reinfer.due("a", 1300.0, 2.0)  # 30 % over the first, 8 % over the last
    assert reinfer.due("a", 1440.0, 2.0)


def test_objects_are_judged_each_on_its_own_and_a_forgotten_one_starts_again() -> None:
    reinfer = rule(interval_s=5.0)
    reinfer.attempted("a", 100.0, 0.0)
    assert reinfer.due("b", 100.0, 1.0) and not reinfer.due("a", 100.0, 1.0)
    reinfer.forget("a")
    assert reinfer.due("a", 100.0, 1.0) and len(reinfer) == 0


def test_settings_refuse_a_rule_that_never_or_always_fires() -> None:
    for bad in ({"area_growth": 0}, {"interval_s": 0}, {"interval_s": -1}):
        with pytest.raises(ValidationError):
            ReinferSettings.model_validate(bad)
