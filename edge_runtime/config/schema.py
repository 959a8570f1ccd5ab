"""The schema of the daemon's config file: one box, its broker, and the pipelines it runs.

Strict like the model manifest: an unknown or misspelt key is an error, because a silently ignored
`min_scor:` or `qso:` would leave a box publishing something other than what its owner wrote.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator

from edge_runtime.backends import BACKENDS, BackendKey
from edge_runtime.config.base import StrictModel
from edge_runtime.config.control import ControlSettings
from edge_runtime.config.directories import default_cache_dir, default_state_dir
from edge_runtime.config.object_sections import check_object_sections
from edge_runtime.config.rollout import RolloutSettings
from edge_runtime.config.trust import TrustSettings
from edge_runtime.mqtt.settings import MqttSettings
from edge_runtime.mqtt.topics import FLEET, check_topic_name
from edge_runtime.package.manifest import DecoderSpec, InputSpec, PadValue, Precision
from edge_runtime.sources.configs import (
    DEFAULT_MAX_IMAGE_PIXELS,
    AnySource,
    CameraSourceConfig,
    SensorSourceConfig,
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


class ModelConfig(StrictModel):
    """The model of a pipeline and how to run it; unset fields leave the choice to the device profile."""

    path: Path = Field(
        description="model package directory (with model.yaml) or bare model file (.xml, .tflite, .onnx); "
        "relative to the config file's directory",
        examples=["models/face_detection"],
    )
    backend: BackendKey | None = Field(default=None, description="pin a backend: openvino, litert or onnxruntime")
    device: str | None = Field(default=None, min_length=1, description="pin a device, e.g. CPU, GPU, NPU, CUDA")
    precision: Precision | None = Field(default=None, description="run at this precision: fp32, fp16, bf16, int8")
    variant: str | None = Field(default=None, description="pin a package variant, e.g. openvino/int8")
    threads: int | None = Field(default=None, ge=1, description="inference threads; default: the profile's")
    hint: Literal["latency", "throughput"] | None = Field(
        default=None,
        description="the backend's performance hint; default: the profile's, else throughput for input ready at "
        "once (a file not played in realtime, a folder, a replay without rate_hz) and latency for live sources",
    )
    max_in_flight: int | None = Field(
        default=None,
        ge=1,
        description="inferences running at once; default: as many as the backend finds best for the device",
    )
    fidelity_tolerance: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="if set, compare the chosen backend with the fp32 reference at load and refuse it when its "
        "largest error exceeds this fraction of the output range",
    )

    @field_validator("variant")
    @classmethod
    def _variant_id(cls, variant: str | None) -> str | None:
        if variant is not None and not re.fullmatch(r"[a-z0-9]+/[A-Za-z0-9._-]+", variant):
            raise ValueError(f"{variant!r} is not a variant id like 'openvino/int8' or 'tflite/fp32'")
        return variant

    @model_validator(mode="after")
    def _variant_loadable_by_backend(self) -> ModelConfig:
        if self.backend is not None and self.variant is not None:
            kind = self.variant.split("/")[0]
            loadable = sorted(f.value for f in BACKENDS[self.backend].formats)
            if kind not in loadable:
                raise ValueError(f"backend {self.backend} cannot load {kind} variants (it loads {', '.join(loadable)})")
        return self


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
    source: AnySource = Field(description="where frames or sensor windows come from; `type` selects the kind")
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

    @field_validator("name")
    @classmethod
    def _topic_safe_name(cls, name: str) -> str:
        return check_topic_name(name)

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

    @model_validator(mode="after")
    def _object_sections_agree_with_track(self) -> PipelineConfig:
        check_object_sections(type(self).__name__, self.track, self.zones, self.lines, self.events)
        return self

    @property
    def follows_objects(self) -> bool:
        """Whether the pipeline publishes objects, not only results: zones, lines or events under a track."""
        track_on = self.track is not None and self.track.enabled
        return track_on and bool(self.zones or self.lines or (self.events is not None and self.events.enabled))

    @property
    def is_camera(self) -> bool:
        return isinstance(self.source, CameraSourceConfig)

    @model_validator(mode="after")
    def _image_settings_need_a_camera(self) -> PipelineConfig:
        if not isinstance(self.source, SensorSourceConfig):
            return self
        if self.publish.snapshot.enabled:
            raise ValueError(f"publish.snapshot needs a camera source; {self.source.type!r} gives sensor windows")
        if self.track is not None:
            raise ValueError(f"track needs a camera source; {self.source.type!r} gives sensor windows")
        image_only = [
            f for f in ("resize", "color_order", "pad_value") if self.preprocess and getattr(self.preprocess, f)
        ]
        if image_only:
            raise ValueError(f"preprocess.{image_only[0]} applies to images; {self.source.type!r} gives sensor windows")
        return self


class BatchingSettings(StrictModel):
    """Triton's dynamic batching rule: a batch leaves when full or when its oldest request waited the delay."""

    max_batch_size: int = Field(
        default=0,
        ge=0,
        le=256,
        description="samples joined into one inference; 0 runs each request on its own, several in flight",
    )
    max_queue_delay_ms: float = Field(default=0.0, ge=0, le=10_000, description="longest wait for a batch to fill")
    max_queue_size: int = Field(default=64, ge=1, le=100_000, description="requests waiting; more are refused (503)")
    timeout_ms: float = Field(default=10_000.0, gt=0, description="a request still queued after this is refused")
    batch_when: Literal["faster", "always"] = Field(
        default="faster",
        description="faster: join requests into batches only where a measurement on this box shows batches beat "
        "single requests in flight (measured once, then remembered); always: wherever the model allows",
    )


class ServedModelConfig(ModelConfig):
    name: str = Field(description="the name requests use: /v2/models/<name>/infer", examples=["faces"])
    batching: BatchingSettings = Field(
        default_factory=BatchingSettings, description="how requests for this model are queued and joined into batches"
    )

    @field_validator("name")
    @classmethod
    def _url_and_topic_safe(cls, name: str) -> str:
        check_topic_name(name)
        if not all(c.isalnum() or c in "._-" for c in name):
            raise ValueError(f"{name!r}: use letters, digits, '.', '_' and '-' only")
        return name


# A bearer token is the only key to an endpoint off loopback, and it can be tried as fast as the endpoint answers.
# 16 characters is the least a generated token has (`openssl rand -hex 8`, 64 bits, already beyond guessing at
# any rate an HTTP endpoint sustains; `openssl rand -hex 16` gives 32); anything shorter is a word someone chose.
MIN_TOKEN_LENGTH = 16


class HttpSettings(StrictModel):
    enabled: bool = Field(default=True, description="false answers requests over MQTT only")
    host: str = Field(default="127.0.0.1", min_length=1, description="address to listen on; loopback by default")
    port: int = Field(default=8000, ge=0, lt=65536, description="TCP port; 0 lets the system choose a free one")
    token: SecretStr | None = Field(
        default=None, description="bearer token requests must carry (e.g. !credential serve-token); needed off loopback"
    )
    tls_cert_file: Path | None = Field(default=None, description="serve HTTPS with this certificate chain (PEM)")
    tls_key_file: Path | None = Field(default=None, description="the certificate's private key (PEM)")
    max_body_bytes: int = Field(default=16 << 20, ge=1024, description="larger requests are refused (413)")
    max_bytes_in_flight: int = Field(
        default=128 << 20,
        ge=1024,
        description="request bodies held at once, counted from their headers; a request past it is refused "
        "(503, Retry-After) before its body is read",
    )
    read_timeout_s: float = Field(default=10.0, gt=0, description="a body slower than this is dropped (408)")
    header_timeout_s: float = Field(
        default=10.0, gt=0, description="a connection that has not sent its request headers by then is closed"
    )
    max_connections: int = Field(
        default=512,
        ge=1,
        description="connections held at once; past it a new one pushes out the oldest still waiting for its "
        "headers (keep it under the process's descriptor limit, LimitNOFILE in the unit)",
    )

    @field_validator("token")
    @classmethod
    def _token_worth_its_name(cls, token: SecretStr | None) -> SecretStr | None:
        """An empty token made `Authorization: Bearer` with no value a key to every route; a short one is guessed."""
        if token is None:
            return None
        value = token.get_secret_value()
        if not value:
            raise ValueError(
                "is empty, which would let anyone in; give a generated token (openssl rand -hex 16), "
                "or leave token out to serve on loopback only"
            )
        if value != value.strip():
            raise ValueError("begins or ends with whitespace, which no Authorization header carries")
        if len(value) < MIN_TOKEN_LENGTH:
            raise ValueError(
                f"has {len(value)} characters, fewer than the {MIN_TOKEN_LENGTH} a token needs not to be guessed; "
                "give a generated one (openssl rand -hex 16)"
            )
        return token

    @model_validator(mode="after")
    def _token_off_loopback(self) -> HttpSettings:
        if self.enabled and self.token is None and not _is_loopback(self.host):
            raise ValueError(
                f"serving on {self.host}, off loopback, needs a token (token: !credential serve-token); "
                "or serve on 127.0.0.1 behind a reverse proxy that authenticates"
            )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        if self.max_bytes_in_flight < self.max_body_bytes:
            raise ValueError(
                f"max_bytes_in_flight ({self.max_bytes_in_flight}) is below max_body_bytes ({self.max_body_bytes}): "
                "the largest body allowed could never be taken"
            )
        return self


class ServeSettings(StrictModel):
    http: HttpSettings = Field(
        default_factory=HttpSettings, description="the Open Inference Protocol endpoint (KServe v2) over HTTP"
    )
    mqtt: bool = Field(default=True, description="also answer requests on <prefix>/<device_id>/infer/<model>")
    models: tuple[ServedModelConfig, ...] = Field(min_length=1, description="the models requests may name")
    share_group: str | None = Field(
        default=None,
        description="also take the fleet's requests, shared among the boxes of this group: "
        "$share/<group>/<prefix>/fleet/infer/<model>",
    )
    max_image_pixels: int = Field(
        default=DEFAULT_MAX_IMAGE_PIXELS,
        ge=1,
        description="an image request whose header declares more pixels is refused (413) before it is decoded",
    )

    @field_validator("share_group")
    @classmethod
    def _share_name(cls, group: str | None) -> str | None:
        """MQTT forbids / + # in a share name; '$' anywhere would make `$share/<group>/...` ambiguous to read."""
        if group is None:
            return None
        check_topic_name(group)
        if "$" in group:
            raise ValueError(f"{group!r} cannot be a share group: it contains '$'")
        return group

    @model_validator(mode="after")
    def _fleet_over_mqtt(self) -> ServeSettings:
        if self.share_group is not None and not self.mqtt:
            raise ValueError("share_group takes the fleet's requests over MQTT, but mqtt is false")
        return self

    @field_validator("models")
    @classmethod
    def _named_uniquely(cls, models: tuple[ServedModelConfig, ...]) -> tuple[ServedModelConfig, ...]:
        seen: dict[str, int] = {}
        for index, model in enumerate(models):
            if model.name in seen:
                raise ValueError(f"model name {model.name!r} is used by models[{seen[model.name]}] and models[{index}]")
            seen[model.name] = index
        return models


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    pipelines: tuple[PipelineConfig, ...] = Field(
        default=(),
        validate_default=True,
        description="what this box runs on its sources; at least one pipeline or served model",
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

    @property
    def enabled_pipelines(self) -> tuple[PipelineConfig, ...]:
        return tuple(p for p in self.pipelines if p.enabled)

    def pipeline(self, name: str) -> PipelineConfig:
        for pipeline in self.pipelines:
            if pipeline.name == name:
                return pipeline
        raise KeyError(name)
