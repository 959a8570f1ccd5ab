"""The schema of the daemon's config file: one box, its broker, and the pipelines it runs.

Strict like the model manifest: an unknown or misspelt key is an error, because a silently ignored
`min_scor:` or `qso:` would leave a box publishing something other than what its owner wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from edge_runtime.config.base import StrictModel
from edge_runtime.config.cascade import CascadeStageConfig, check_stage_names
from edge_runtime.config.control import ControlSettings
from edge_runtime.config.directories import default_cache_dir, default_state_dir
from edge_runtime.config.model import ModelConfig
from edge_runtime.config.object_sections import check_object_sections
from edge_runtime.config.rollout import RolloutSettings
from edge_runtime.config.serving import ServeSettings
from edge_runtime.config.trust import TrustSettings
from edge_runtime.mqtt.discovery_settings import HomeAssistantSettings
from edge_runtime.mqtt.settings import MqttSettings
from edge_runtime.mqtt.topics import FLEET, check_topic_name
from edge_runtime.package.manifest import DecoderSpec, InputSpec, PadValue
from edge_runtime.sources.configs import (
    AnySource,
    ImageSourceConfig,
    NamedSource,
    SensorSourceConfig,
    SharedSourceConfig,
)
from edge_runtime.tracking.config import TrackConfig
from edge_runtime.tracking.events import EventsConfig
from edge_runtime.tracking.lines import LineConfig, check_line_names
from edge_runtime.tracking.zones import ZoneConfig, check_zone_names


class PrometheusSettings(StrictModel):
    enabled: bool = Field(default=False, description="serve the counters at http://host:port/metrics")
    host: str = Field(default="127.0.0.1", min_length=1, description="address to listen on; 0.0.0.0 for all")
    port: int = Field(default=9464, gt=0, lt=65536, description="TCP port of the metrics endpoint")


class StatsSettings(StrictModel):
    interval_s: float = Field(default=30.0, gt=0, description="seconds between two messages on the stats topic")
    prometheus: PrometheusSettings = Field(
        default_factory=PrometheusSettings, description="optional Prometheus endpoint with the same counters"
    )


class PreprocessOverrides(StrictModel):
    """Fields of the manifest's input spec that a deployment may change, e.g. for a camera that sends RGB."""

    resize: Literal["stretch", "letterbox", "crop"] | None = Field(
        default=None, description="how frames are fitted to the model's input size"
    )
    color_order: Literal["RGB", "BGR", "GRAY"] | None = Field(
        default=None, description="channel order the model expects"
    )
    mean: tuple[float, ...] | None = Field(
        default=None,
        min_length=1,
        description="subtracted from each channel's 0-255 pixel values, one value or one per channel",
    )
    std: tuple[float, ...] | None = Field(
        default=None,
        min_length=1,
        description="what each channel is divided by after the mean, one value or one per channel; not zero",
    )
    pad_value: PadValue | None = Field(
        default=None,
        description="letterbox border in 0-255 pixel values, one or one per channel (the colour the model was "
        "trained with)",
    )

    @field_validator("std")
    @classmethod
    def _no_zero_std(cls, std: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if std is not None and any(s == 0 for s in std):
            raise ValueError("std must not contain zero")
        return std

    def applied_to(self, spec: InputSpec) -> InputSpec:
        """The manifest's input spec with these overrides; raises pydantic's ValidationError if they do not fit."""
        return InputSpec.model_validate(spec.model_dump() | self.model_dump(exclude_none=True))


class DecoderOverride(StrictModel):
    """A different decoder, or the manifest's decoder with some parameters changed."""

    name: str | None = Field(
        default=None, min_length=1, description="decoder name, e.g. ssd_anchors; default: the manifest's decoder"
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="the decoder's parameters; for the manifest's decoder, merged over the manifest's parameters",
    )

    def applied_to(self, manifest_decoder: DecoderSpec | None) -> DecoderSpec:
        """The decoder to build; raises ValueError when no name is given and the manifest has no decoder."""
        name = self.name or (manifest_decoder.name if manifest_decoder else None)
        if name is None:
            raise ValueError("the model's manifest names no decoder; give decoder.name")
        if manifest_decoder is not None and manifest_decoder.name == name:
            return DecoderSpec(name=name, params=manifest_decoder.params | self.params)
        return DecoderSpec(name=name, params=self.params)


class SnapshotSettings(StrictModel):
    enabled: bool = Field(default=False, description="publish a JPEG of frames that produced a result")
    max_rate_hz: float = Field(default=0.2, gt=0, description="at most this many snapshots per second")
    jpeg_quality: int = Field(default=80, ge=1, le=100, description="JPEG quality, 1..100")


class PublishSettings(StrictModel):
    qos: Literal[0, 1, 2] = Field(default=1, description="MQTT QoS of result messages")
    retain: bool = Field(default=False, description="retain the latest result on the broker")
    only_on_change: bool = Field(default=False, description="publish a result only when it differs from the last")
    min_score: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="leave out detections and classes scoring below this, and send nothing for a frame left "
        "with none; a result with one score (a keypoint set's mean, an anomaly score) is sent whole or not at "
        "all; results without scores (segmentation, regression, raw) are always sent",
    )
    snapshot: SnapshotSettings = Field(
        default_factory=SnapshotSettings,
        description="JPEG snapshots with the results drawn on <prefix>/<device_id>/<pipeline>/snapshot (cameras only)",
    )


class PipelineConfig(StrictModel):
    """source → preprocess → infer → decode → publish, under one name that becomes a topic level."""

    name: str = Field(
        description="unique pipeline name; used in MQTT topics, so no / + # or whitespace", examples=["entrance"]
    )
    enabled: bool = Field(default=True, description="false keeps the pipeline in the file without running it")
    source: AnySource = Field(
        description="where frames or sensor windows come from; `type` selects the kind, or the name of a camera in "
        "`sources:` (short for `{type: shared, name: ...}`)"
    )
    model: ModelConfig = Field(
        description="the model this pipeline runs and how; keys left unset leave the choice to the device profile"
    )
    preprocess: PreprocessOverrides | None = Field(
        default=None, description="overrides of the manifest's input preprocessing"
    )
    decoder: DecoderOverride | None = Field(default=None, description="replaces the manifest's output decoder")
    publish: PublishSettings = Field(
        default_factory=PublishSettings,
        description="which results go to <prefix>/<device_id>/<pipeline>/result, and how",
    )
    track: TrackConfig | None = Field(
        default=None,
        description="follow detected objects from frame to frame: each detection that is a confirmed object "
        "gets its `track_id` and `stationary` in the result (cameras with a detection model only); null: no tracking",
    )
    zones: dict[str, ZoneConfig] = Field(
        default_factory=dict,
        description="areas of the ground by name, which becomes a topic level: each tracked object's detection "
        "gets the zones it is in, and each zone has retained counts per label and its occupancy (needs track)",
        examples=[{"yard": {"polygon": [[0.05, 0.55], [0.95, 0.55], [0.95, 1.0], [0.05, 1.0]]}}],
    )
    lines: dict[str, LineConfig] = Field(
        default_factory=dict,
        description="counting lines by name, which becomes a topic level: each crossing of a tracked object is "
        "published, and the line's retained totals in and out per label (needs track)",
        examples=[{"gate": {"points": [[0.3, 0.6], [0.7, 0.6]], "inbound": "right"}}],
    )
    events: EventsConfig | None = Field(
        default=None,
        description="a new, update and end message on <pipeline>/events for each tracked object, with its "
        "pictures (needs track); null: no events",
    )
    cascade: list[CascadeStageConfig] = Field(
        default_factory=list,
        description="second models run on the crops of the detections, their answers attached to each "
        "detection as sub_label or attributes; with track, per tracked object (cameras with a detection model only)",
    )

    @field_validator("name")
    @classmethod
    def _topic_safe_name(cls, name: str) -> str:
        return check_topic_name(name)

    @field_validator("source", mode="before")
    @classmethod
    def _source_by_name(cls, source: object) -> object:
        return {"type": "shared", "name": source} if isinstance(source, str) else source

    @field_validator("zones")
    @classmethod
    def _zone_names_are_topic_levels(cls, zones: dict[str, ZoneConfig]) -> dict[str, ZoneConfig]:
        check_zone_names(zones)
        return zones

    @field_validator("lines")
    @classmethod
    def _line_names_are_topic_levels(cls, lines: dict[str, LineConfig]) -> dict[str, LineConfig]:
        check_line_names(lines)
        return lines

    @field_validator("cascade")
    @classmethod
    def _stage_names_unique(cls, cascade: list[CascadeStageConfig]) -> list[CascadeStageConfig]:
        return check_stage_names(cascade)

    @model_validator(mode="after")
    def _object_sections_agree_with_track(self) -> PipelineConfig:
        check_object_sections(type(self).__name__, self.track, self.zones, self.lines, self.events, self.cascade)
        return self

    @property
    def follows_objects(self) -> bool:
        """Whether the pipeline publishes objects, not only results: zones, lines or events under a track."""
        track_on = self.track is not None and self.track.enabled
        return track_on and bool(self.zones or self.lines or (self.events is not None and self.events.enabled))

    @property
    def is_camera(self) -> bool:
        return isinstance(self.source, ImageSourceConfig)

    @property
    def shared_source(self) -> str | None:
        """The name in `sources:` of the camera this pipeline reads, or None for a source of its own."""
        return self.source.name if isinstance(self.source, SharedSourceConfig) else None

    @model_validator(mode="after")
    def _image_settings_need_a_camera(self) -> PipelineConfig:
        if not isinstance(self.source, SensorSourceConfig):
            return self
        if self.publish.snapshot.enabled:
            raise ValueError(f"publish.snapshot needs a camera source; {self.source.type!r} gives sensor windows")
        if self.track is not None:
            raise ValueError(f"track needs a camera source; {self.source.type!r} gives sensor windows")
        if self.cascade:
            raise ValueError(f"cascade needs a camera source; {self.source.type!r} gives sensor windows")
        image_only = [
            f for f in ("resize", "color_order", "pad_value") if self.preprocess and getattr(self.preprocess, f)
        ]
        if image_only:
            raise ValueError(f"preprocess.{image_only[0]} applies to images; {self.source.type!r} gives sensor windows")
        return self


LogLevel = Literal["debug", "info", "warning", "error"]


class DaemonConfig(StrictModel):
    device_id: str = Field(
        description="this box's id in MQTT topics and the client id; no / + # or whitespace", examples=["box-1"]
    )
    mqtt: MqttSettings = Field(
        default_factory=MqttSettings,
        description="the broker the box publishes its results and status to and takes requests and commands from",
    )
    state_dir: Path = Field(
        default_factory=lambda: default_state_dir(),
        description="spool and stored choices; default $STATE_DIRECTORY, else /var/lib/edge-runtime as root, "
        "else $XDG_STATE_HOME/edge-runtime",
    )
    cache_dir: Path = Field(
        default_factory=lambda: default_cache_dir(),
        description="compiled models and engines; default $CACHE_DIRECTORY, else /var/cache/edge-runtime as root, "
        "else $XDG_CACHE_HOME/edge-runtime",
    )
    stats: StatsSettings = Field(
        default_factory=StatsSettings,
        description="counters and rates (fps, drops, latency, spool depth) on <prefix>/<device_id>/stats",
    )
    log_level: LogLevel = Field(default="info", description="debug, info, warning or error")
    serve: ServeSettings | None = Field(default=None, description="models answered on request, over HTTP")
    trust: TrustSettings = Field(default_factory=TrustSettings, description="signed model packages this box loads")
    control: ControlSettings = Field(
        default_factory=ControlSettings, description="operators whose signed commands this box takes over MQTT"
    )
    rollout: RolloutSettings = Field(
        default_factory=RolloutSettings, description="how new model releases are fetched, tried and kept"
    )
    sources: dict[str, NamedSource] = Field(
        default_factory=dict,
        description="cameras by name, each opened and decoded once for every pipeline whose `source:` names it; "
        "each pipeline still takes frames at its own max_fps and behind its own motion gate",
        examples=[{"front-door": {"type": "stream", "url": "rtsp://camera-1.lan:554/stream1"}}],
    )
    pipelines: tuple[PipelineConfig, ...] = Field(
        default=(),
        validate_default=True,
        description="what this box runs on its sources; at least one pipeline or served model",
    )
    homeassistant: HomeAssistantSettings | None = Field(
        default=None,
        description="announce the box and its pipelines to Home Assistant through MQTT discovery "
        "(docs/recipes/home-assistant.md); null: no discovery",
    )

    @field_validator("device_id")
    @classmethod
    def _topic_safe_id(cls, device_id: str) -> str:
        check_topic_name(device_id)
        if device_id == FLEET:
            raise ValueError(
                f"{FLEET!r} is reserved: <prefix>/{FLEET}/infer/<model> is where the fleet's requests arrive"
            )
        return device_id

    @field_validator("sources")
    @classmethod
    def _source_names(cls, sources: dict[str, NamedSource]) -> dict[str, NamedSource]:
        """Names appear in logs, the stats topic and the pipelines' `source:`: one word each, like a topic level."""
        for name in sources:
            check_topic_name(name, "source")
        return sources

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_case_level(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("pipelines")
    @classmethod
    def _named_uniquely(cls, pipelines: tuple[PipelineConfig, ...], info: ValidationInfo) -> tuple[PipelineConfig, ...]:
        """Two pipelines with one name would publish to one topic and be indistinguishable on reload."""
        # `serve` absent from info.data: it was given but is invalid, and its own errors say so.
        if not pipelines and "serve" in info.data and info.data["serve"] is None:
            raise ValueError("at least one pipeline is needed, or models to serve")
        first_index: dict[str, int] = {}
        for index, pipeline in enumerate(pipelines):
            if pipeline.name in first_index:
                raise ValueError(
                    f"pipeline name {pipeline.name!r} is used by pipelines[{first_index[pipeline.name]}] "
                    f"and pipelines[{index}]; names must be unique"
                )
            first_index[pipeline.name] = index
        return pipelines

    @model_validator(mode="after")
    def _home_assistant_names_pipelines_of_the_box(self) -> DaemonConfig:
        if self.homeassistant is None:
            return self
        names = [pipeline.name for pipeline in self.pipelines]
        unknown = [name for name in self.homeassistant.pipelines if name not in names]
        if unknown:
            known = ", ".join(names) or "none"
            raise ValueError(
                f"homeassistant.pipelines names {', '.join(map(repr, unknown))}, which is not a pipeline of this box "
                f"(its pipelines: {known})"
            )
        return self

    @property
    def enabled_pipelines(self) -> tuple[PipelineConfig, ...]:
        return tuple(p for p in self.pipelines if p.enabled)

    def pipeline(self, name: str) -> PipelineConfig:
        for pipeline in self.pipelines:
            if pipeline.name == name:
                return pipeline
        raise KeyError(name)
