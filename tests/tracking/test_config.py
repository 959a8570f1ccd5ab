"""The `track:` section: defaults that work, inheritance from `default`, and mistakes said plainly."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from edge_runtime.config.base import describe_validation_error
from edge_runtime.tracking.config import ObjectFilter, TrackConfig


def problems(data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        TrackConfig.model_validate(data)
    return "\n".join(describe_validation_error(caught.value))


def test_an_empty_section_tracks_every_label_with_frigate_and_bytetrack_defaults() -> None:
    config = TrackConfig.model_validate({})
    assert config.enabled and config.tracks("person") and config.tracks("anything")
    assert (config.scores.low, config.scores.high, config.scores.new_track) == (0.1, 0.5, 0.6)
    assert (config.match.iou, config.match.relative_distance) == (0.3, 2.5)
    assert (config.confirm_hits, config.lost_after_s, config.stationary_after_s) == (2, 5.0, 10.0)
    person = config.filter_for("person")
    assert (person.min_score, person.threshold, person.min_area, person.max_area) == (0.5, 0.7, 0.0, None)


def test_a_label_entry_takes_the_fields_it_does_not_set_from_default() -> None:
    config = TrackConfig.model_validate(
        {
            "labels": ["person", "car"],
            "filters": {"default": {"threshold": 0.8, "min_score": 0.6}, "car": {"min_area": 0.01}},
        }
    )
    car = config.filter_for("car")
    assert (car.threshold, car.min_score, car.min_area) == (0.8, 0.6, 0.01)
    assert config.filter_for("person") == config.filters["default"]
    assert not config.tracks("dog")


def test_without_a_default_entry_labels_get_frigates_defaults() -> None:
    config = TrackConfig.model_validate({"labels": ["car"], "filters": {"car": {"min_ratio": 1.0}}})
    assert config.filter_for("car") == ObjectFilter(min_ratio=1.0)
    assert config.filter_for("car").threshold == 0.7


def test_score_levels_must_be_ordered() -> None:
    text = problems({"scores": {"low": 0.6, "high": 0.5}})
    assert text.startswith("scores:") and "low <= high <= new_track" in text
    assert "new_track" in problems({"scores": {"high": 0.7, "new_track": 0.6}})


@pytest.mark.parametrize(
    ("masks", "expected"),
    [
        ([[[0.1, 0.1], [0.5, 0.1]]], "has 2 points; a polygon needs at least 3"),
        ([[[0.1, 0.1], [1.2, 0.1], [0.5, 0.5]]], "points outside the frame: [(1.2, 0.1)]"),
        ([[[0.1, -0.1], [0.2, 0.1], [0.5, 0.5]]], "fractions of the frame's width and height"),
    ],
)
def test_masks_are_polygons_in_relative_coordinates(masks: list[Any], expected: str) -> None:
    text = problems({"masks": masks})
    assert text.startswith("masks:") and expected in text


def test_filters_must_name_tracked_labels() -> None:
    text = problems({"labels": ["person"], "filters": {"persn": {"min_score": 0.6}}})
    assert "filters for labels that are not tracked: persn" in text and "tracked: person" in text


def test_area_and_ratio_ranges_must_leave_room_for_a_box() -> None:
    assert "min_ratio 3.0 is above max_ratio 2.0" in problems(
        {"filters": {"default": {"min_ratio": 3, "max_ratio": 2}}}
    )
    assert "min_area 0.5 is above max_area 0.1" in problems(
        {"filters": {"default": {"min_area": 0.5, "max_area": 0.1}}}
    )
    # Pixels and fractions are not comparable without the frame: 5000 px may well be under half a frame.
    TrackConfig.model_validate({"filters": {"default": {"min_area": 5000, "max_area": 0.5}}})


def test_a_label_entry_is_checked_together_with_what_it_takes_from_default() -> None:
    text = problems({"labels": ["car"], "filters": {"default": {"max_ratio": 2.0}, "car": {"min_ratio": 3.0}}})
    assert "filters.car, with the fields it takes from default: min_ratio 3.0 is above max_ratio 2.0" in text


def test_misspelt_and_out_of_range_fields_are_errors() -> None:
    assert "lost_after: unknown field" in problems({"lost_after": 5})
    assert "confirm_hits:" in problems({"confirm_hits": 0})
    assert "labels: labels listed twice: car" in problems({"labels": ["car", "person", "car"]})
    TrackConfig.model_validate({"match": {"relative_distance": 0}})  # 0 turns the second chance off


def _fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str | None]]:
    found = []
    for name, field in model.model_fields.items():
        found.append((prefix + name, field.description))
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found.extend(_fields(annotation, f"{prefix}{name}."))
    return found


def test_every_field_says_what_it_does() -> None:
    fields = _fields(TrackConfig) + _fields(ObjectFilter, "filters.<label>.")
    assert [name for name, description in fields if not description] == []
    described = dict(fields)
    for timed in ("lost_after_s", "stationary_after_s"):
        assert "seconds" in (described[timed] or "")
    assert "pixels" in (described["filters.<label>.min_area"] or "")
