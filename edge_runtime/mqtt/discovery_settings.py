"""The `homeassistant:` section of the daemon's config: what the box announces to Home Assistant.

Home Assistant finds MQTT devices by itself through its discovery protocol: a retained config message
under its discovery prefix describes a device and its entities, and Home Assistant creates them without
anything written on its side. The section is optional; `homeassistant: {}` turns discovery on with the
defaults below, and each pipeline then shows the entities its tracking, zones and lines give.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from edge_runtime.config.base import StrictModel
from edge_runtime.mqtt.topics import check_topic_name

__all__ = ["DEFAULT_DISCOVERY_PREFIX", "HomeAssistantSettings", "PipelineEntities"]

DEFAULT_DISCOVERY_PREFIX = "homeassistant"  # Home Assistant's own default


class PipelineEntities(StrictModel):
    """Which entities one pipeline's device shows in Home Assistant; every kind is on by default."""

    labels: tuple[str, ...] | None = Field(
        default=None,
        description="labels with their own count, occupancy and picture entities; default: the pipeline's "
        "track.labels (a pipeline tracking every label shows only the counts over all labels)",
        examples=[["person", "car"]],
    )
    counts: bool = Field(default=True, description="a count sensor per label, and over all labels")
    occupancy: bool = Field(default=True, description="an occupancy binary sensor per label and per zone")
    zones: bool = Field(default=True, description="each zone's occupancy and counts")
    lines: bool = Field(default=True, description="an event entity per line for its crossings, and its totals")
    snapshots: bool = Field(
        default=True, description="an image per label of the latest best picture (where events send pictures)"
    )
    health: bool = Field(default=True, description="frames per second, inference latency and the model in use")

    @field_validator("labels")
    @classmethod
    def _labels_are_topic_levels(cls, labels: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for label in labels or ():
            if not label or any(char in label for char in "/+#\0"):
                raise ValueError(f"{label!r} cannot stand as one MQTT topic level")
        return labels


class HomeAssistantSettings(StrictModel):
    enabled: bool = Field(default=True, description="announce the box and its pipelines to Home Assistant")
    discovery_prefix: str = Field(
        default=DEFAULT_DISCOVERY_PREFIX,
        description="Home Assistant's MQTT discovery prefix (its MQTT integration's setting)",
    )
    status_topic: str | None = Field(
        default=None,
        description="where Home Assistant says `online` after each connect, upon which the box announces itself "
        "again; default <discovery_prefix>/status",
    )
    controls: bool = Field(
        default=False,
        description="a switch per pipeline that turns it off and on, on <prefix>/<device_id>/<pipeline>/enabled/set; "
        "whoever may publish there can, so limit that topic with the broker's ACL (docs/recipes/home-assistant.md)",
    )
    pipelines: dict[str, PipelineEntities] = Field(
        default_factory=dict,
        description="per pipeline name, which entities it shows; a pipeline not named shows the defaults",
        examples=[{"entrance": {"labels": ["person"], "snapshots": False}}],
    )

    @field_validator("discovery_prefix")
    @classmethod
    def _prefix_is_a_topic_level(cls, prefix: str) -> str:
        return check_topic_name(prefix, "discovery prefix")

    @field_validator("status_topic")
    @classmethod
    def _status_topic_names_one_topic(cls, topic: str | None) -> str | None:
        if topic is not None and (not topic or "+" in topic or "#" in topic):
            raise ValueError(f"{topic!r} must be one topic, without the wildcards + and #")
        return topic

    @property
    def birth_topic(self) -> str:
        """Where Home Assistant's birth (`online`) and will (`offline`) arrive."""
        return self.status_topic or f"{self.discovery_prefix}/status"

    def entities_of(self, pipeline: str) -> PipelineEntities:
        return self.pipelines.get(pipeline) or PipelineEntities()
