"""What a pipeline's `track:` section says: which objects to follow, how sure to be, and for how long.

Times are seconds of capture time, never frame counts: `max_fps` and the motion gate make the interval
between analysed frames irregular, so "5 frames" would mean a second on one camera and a minute on
another. Masks and the area limits given as fractions are relative to the frame, so one config fits
every resolution a camera may be switched to.

The score settings come from two sources that answer different questions. `scores` (ByteTrack) decide
which detections may steer the tracker: confident ones first, weak ones only to keep an existing track
alive, and only confident ones may start a track. `filters` (Frigate's object filters) decide whether a
track is a real object: its median score over the last frames has to reach `threshold` once.
"""

from __future__ import annotations

from pydantic import Field, ValidationError, field_validator, model_validator

from edge_runtime.config.base import StrictModel

__all__ = [
    "DEFAULT_FILTER",
    "MatchSettings",
    "ObjectFilter",
    "Point",
    "ScoreSettings",
    "TrackConfig",
    "check_distinct",
]

DEFAULT_FILTER = "default"

Point = tuple[float, float]


def check_distinct(names: list[str], what: str = "label") -> list[str]:
    """`names` (labels, zones) unchanged when none is empty or listed twice; else a ValueError saying which."""
    if any(not name for name in names):
        raise ValueError(f"a {what} must not be empty")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{what}s listed twice: {', '.join(repeated)}")
    return names


class ScoreSettings(StrictModel):
    """Detection scores that steer the tracker (ByteTrack's two-stage association)."""

    high: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="detections scoring at least this are matched first, against every track",
    )
    low: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="detections between low and high only keep an existing track alive (a person half hidden "
        "behind a car); below low a detection is ignored",
    )
    new_track: float = Field(
        default=0.6,
        ge=0,
        le=1,
        description="an unmatched detection starts a new track only when it scores at least this",
    )

    @model_validator(mode="after")
    def _ordered(self) -> ScoreSettings:
        if not self.low <= self.high <= self.new_track:
            raise ValueError(
                f"need low <= high <= new_track, got low {self.low}, high {self.high}, new_track {self.new_track}: "
                "a detection that may start a track must also be trusted to match one"
            )
        return self


class MatchSettings(StrictModel):
    """When a detection is the same object as a track's predicted box."""

    iou: float = Field(
        default=0.3,
        gt=0,
        le=1,
        description="minimum overlap (intersection over union, 0-1) between a detection and a track's predicted "
        "box; with fuse_score the overlap is first multiplied by the detection's score",
    )
    fuse_score: bool = Field(
        default=True,
        description="weigh overlap by score, so that between two overlapping detections the confident one wins",
    )
    relative_distance: float = Field(
        default=2.5,
        ge=0,
        description="second chance for detections no box overlapped (fast objects at 5 fps): bottom-centre "
        "displacement in object widths and heights, plus size change, at most this far (Frigate's distance, "
        "whose default is 2.5); 0 disables it",
    )


class ObjectFilter(StrictModel):
    """Frigate's object filter: which detections count, and when a track is a real object."""

    min_score: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="a detection scoring below this counts as not seen in the score history",
    )
    threshold: float = Field(
        default=0.7,
        ge=0,
        le=1,
        description="a track becomes a real object, and stays one, once the median of its last 10 scores "
        "(0 for frames it was missed) reaches this; only real objects are reported",
    )
    min_area: float = Field(
        default=0.0,
        ge=0,
        description="smallest box area: pixels when above 1, else a fraction of the frame (0.01 = 1 %)",
    )
    max_area: float | None = Field(
        default=None,
        gt=0,
        description="largest box area: pixels when above 1, else a fraction of the frame; null: no limit",
    )
    min_ratio: float = Field(default=0.0, ge=0, description="smallest width / height of a box (0.5: twice as tall)")
    max_ratio: float | None = Field(
        default=None, gt=0, description="largest width / height of a box (2: twice as wide); null: no limit"
    )

    @model_validator(mode="after")
    def _ranges(self) -> ObjectFilter:
        if self.max_ratio is not None and self.min_ratio > self.max_ratio:
            raise ValueError(f"min_ratio {self.min_ratio} is above max_ratio {self.max_ratio}: no box would pass")
        if self.max_area is not None and (self.min_area > 1) == (self.max_area > 1) and self.min_area > self.max_area:
            raise ValueError(f"min_area {self.min_area} is above max_area {self.max_area}: no box would pass")
        return self


def _default_filters() -> dict[str, ObjectFilter]:
    return {DEFAULT_FILTER: ObjectFilter()}


class TrackConfig(StrictModel):
    """Follow objects from frame to frame: stable ids, confirmed objects only, and when they leave."""

    enabled: bool = Field(default=True, description="false keeps the section in the file without tracking")
    labels: list[str] = Field(
        default_factory=list,
        description="labels to track; detections of other labels are left untracked; empty: every label",
    )
    scores: ScoreSettings = Field(default_factory=ScoreSettings, description="which detections steer the tracker")
    match: MatchSettings = Field(default_factory=MatchSettings, description="when a detection is a track's object")
    confirm_hits: int = Field(
        default=2,
        ge=1,
        description="a new track is reported once it matched this many analysed frames in a row; one miss "
        "before that drops it (a detector's one-frame ghost never becomes an object)",
    )
    lost_after_s: float = Field(
        default=5.0,
        gt=0,
        description="seconds of capture time a track may go unmatched, counted from the first analysed frame "
        "that missed it, before the object is said to have left",
    )
    stationary_after_s: float = Field(
        default=10.0,
        gt=0,
        description="seconds an object's box must stay in place (overlap with where it stopped of at least 0.6) "
        "before it is flagged stationary",
    )
    filters: dict[str, ObjectFilter] = Field(
        default_factory=_default_filters,
        description="per-label object filters; 'default' applies to labels without an entry of their own, and "
        "an entry takes the fields it does not set from 'default'",
    )
    masks: list[list[Point]] = Field(
        default_factory=list,
        description="polygons of [x, y] points relative to the frame (0-1, origin top left); a detection whose "
        "box's bottom centre lies inside one is ignored (a tree that moves, a road beyond the fence)",
    )

    @field_validator("labels")
    @classmethod
    def _distinct_labels(cls, labels: list[str]) -> list[str]:
        return check_distinct(labels)

    @field_validator("masks")
    @classmethod
    def _relative_polygons(cls, masks: list[list[Point]]) -> list[list[Point]]:
        for number, polygon in enumerate(masks):
            if len(polygon) < 3:
                raise ValueError(f"mask {number} has {len(polygon)} points; a polygon needs at least 3")
            outside = [point for point in polygon if not all(0.0 <= value <= 1.0 for value in point)]
            if outside:
                raise ValueError(
                    f"mask {number} has points outside the frame: {outside}; coordinates are fractions of the "
                    "frame's width and height, from 0 to 1"
                )
        return masks

    @model_validator(mode="after")
    def _filters_for_tracked_labels(self) -> TrackConfig:
        if self.labels:
            untracked = sorted(set(self.filters) - set(self.labels) - {DEFAULT_FILTER})
            if untracked:
                raise ValueError(
                    f"filters for labels that are not tracked: {', '.join(untracked)}; "
                    f"add them to labels or remove the filters (tracked: {', '.join(self.labels)})"
                )
        for label in self.filters:
            try:
                self.filter_for(label)
            except ValidationError as error:
                problems = "; ".join(item["msg"].removeprefix("Value error, ") for item in error.errors())
                raise ValueError(f"filters.{label}, with the fields it takes from default: {problems}") from None
        return self

    def filter_for(self, label: str) -> ObjectFilter:
        """The label's filter: its own entry's fields over the `default` entry's."""
        default = self.filters.get(DEFAULT_FILTER, ObjectFilter())
        own = self.filters.get(label)
        if own is None or label == DEFAULT_FILTER:
            return default
        merged = default.model_dump() | own.model_dump(include=own.model_fields_set)
        return ObjectFilter.model_validate(merged)

    def tracks(self, label: str) -> bool:
        return not self.labels or label in self.labels
