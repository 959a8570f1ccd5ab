"""A pipeline's `cascade:` section: second models run on the crops of what its detector found.

Each stage names a model package (loaded through the model pool like the pipeline's own model, so the
device profile, a pinned precision, the fidelity guard and an active rollout release all apply to it),
the detector labels whose boxes it looks at, how small a box it skips, how much of the surroundings it
takes with the crop, and how its answer is attached to the detection: as the object's `sub_label` (a
classifier's top class names the person, the plate, the dog's breed) or under `attributes` (each class
of a classifier with its score, or a keypoint model's points in image pixels).

With tracking, a stage runs per tracked object: again only when `reinfer` says so, and a sub-label is
given only by `consensus` over the object's attempts. Without tracking it runs on every matching
detection of every frame, the `max_crops` best of them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from edge_runtime.config.base import StrictModel
from edge_runtime.config.model import ModelConfig
from edge_runtime.mqtt.topics import check_topic_name
from edge_runtime.tracking.config import check_distinct
from edge_runtime.tracking.consensus import ConsensusSettings
from edge_runtime.tracking.reinference import ReinferSettings

__all__ = ["AttachAs", "CascadeStageConfig", "check_stage_names"]

AttachAs = Literal["sub_label", "attributes"]


class CascadeStageConfig(StrictModel):
    """One second model on the crops of the pipeline's detections."""

    name: str = Field(
        description="the stage's name: the key of its answer under a detection's attributes, and in logs",
        examples=["landmarks"],
    )
    model: ModelConfig = Field(description="the model run on each crop, loaded like the pipeline's model")
    labels: list[str] = Field(
        min_length=1, description="detector labels whose boxes the stage runs on", examples=[["face"]]
    )
    attach: AttachAs = Field(
        default="attributes",
        description="sub_label: a classifier's top class becomes the object's sub_label (with track: by "
        "consensus); attributes: each class with its score, or a keypoint model's points, under the stage's name",
    )
    min_width: int = Field(default=0, ge=0, description="boxes narrower than this many source pixels are skipped")
    min_height: int = Field(default=0, ge=0, description="boxes shorter than this many source pixels are skipped")
    padding: float = Field(
        default=0.0,
        ge=0,
        le=2,
        description="fraction of the box's width and height added on each side of the crop (0.25 takes a "
        "face with its hair and chin, as landmark models are trained)",
    )
    min_score: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="classes below this score are not attached: as attributes, or as the sub_label "
        "without track (with track, consensus.min_score decides)",
    )
    max_crops: int = Field(
        default=16,
        ge=1,
        description="crops per frame at most: without track, the best-scoring detections; with track, the "
        "objects due longest",
    )
    batch: Literal["faster", "always", "never"] = Field(
        default="faster",
        description="run a frame's crops as one batch where the backend frees the model's batch dimension and a "
        "batch gives each crop its own answer: faster: only where batches of max_crops beat crops side by side "
        "on this box (measured once and remembered, as for served models); always; never: side by side on the "
        "async runner",
    )
    reinfer: ReinferSettings = Field(
        default_factory=ReinferSettings, description="with track: when an object's crop is run again"
    )
    consensus: ConsensusSettings = Field(
        default_factory=ConsensusSettings,
        description="with track and attach: sub_label: when the attempts agree enough to give the sub_label",
    )

    @field_validator("name")
    @classmethod
    def _topic_safe_name(cls, name: str) -> str:
        return check_topic_name(name)

    @field_validator("labels")
    @classmethod
    def _distinct_labels(cls, labels: list[str]) -> list[str]:
        return check_distinct(labels)


def check_stage_names(stages: list[CascadeStageConfig]) -> list[CascadeStageConfig]:
    """Two stages with one name would write one attribute key; refused, naming both."""
    first: dict[str, int] = {}
    for index, stage in enumerate(stages):
        if stage.name in first:
            raise ValueError(f"stage name {stage.name!r} is used by cascade[{first[stage.name]}] and cascade[{index}]")
        first[stage.name] = index
    return stages
