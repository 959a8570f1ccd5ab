"""Building a pipeline from its config: the decoder, preprocessing overrides, source and outputs it names,
for a camera that follows objects what it publishes about them (`object_outputs`), and its cascade's
stages on the models the daemon acquired for them (`cascade_models`).

The daemon acquires the model (shared between pipelines by the model pool) and hands the rest here, so
the wiring between a `PipelineConfig` and a running `Pipeline` is read in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from edge_runtime.config import PipelineConfig
from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.base import Decoder
from edge_runtime.decoders.decoded import SubLabel
from edge_runtime.mqtt.topics import Topics
from edge_runtime.package.manifest import DecoderSpec, InputSpec
from edge_runtime.pipeline.cascade import Cascade, CascadeStage, SubLabelAssigned
from edge_runtime.pipeline.cascade_models import StageModels
from edge_runtime.pipeline.object_outputs import EVENT_QOS, ObjectOutputs
from edge_runtime.pipeline.outputs import MessageSink, PublishPolicy
from edge_runtime.pipeline.results import encode
from edge_runtime.pipeline.streaming import Pipeline, RetainedSink
from edge_runtime.placement.model import LoadedModel
from edge_runtime.sources import make_source
from edge_runtime.sources.base import SourceContext
from edge_runtime.sources.reconnect import mask_url
from edge_runtime.tracking.events import FindingsOf

__all__ = [
    "build_pipeline",
    "cascade_for",
    "decoder_for",
    "decoder_of",
    "describe_source",
    "input_spec_for",
    "object_outputs_for",
]


def build_pipeline(
    config: PipelineConfig,
    model: LoadedModel,
    *,
    topics: Topics,
    sink: MessageSink,
    source_context: SourceContext,
    retained: RetainedSink,
    on_progress: Callable[[str], None] | None = None,
    on_waiting: Callable[[str, str], None] | None = None,
    cascade_models: Sequence[StageModels] = (),
) -> Pipeline:
    """The pipeline `config` describes, on `model`, its cascade's stages on `cascade_models`; not started."""
    cascade = cascade_for(config, cascade_models, topics, sink)
    findings_of = cascade.findings if cascade is not None else None
    objects = object_outputs_for(config, model.package.manifest.labels, topics, sink, retained, findings_of)
    return Pipeline(
        name=config.name,
        topics=topics,
        source=make_source(config.source, describe_source(config), source_context),
        model=model,
        decoder=decoder_for(config, model),
        input_spec=input_spec_for(config, model),
        policy=publish_policy(config),
        sink=sink,
        track=config.track,
        object_listeners=[objects] if objects is not None else [],
        zones_of=objects.zones_of if objects is not None and config.zones else None,
        cascade=cascade,
        retained=retained,
        max_in_flight=config.model.max_in_flight,
        on_progress=on_progress,
        on_waiting=on_waiting,
    )


def object_outputs_for(
    config: PipelineConfig,
    model_labels: Sequence[str],
    topics: Topics,
    sink: MessageSink,
    retained: RetainedSink,
    findings_of: FindingsOf | None = None,
) -> ObjectOutputs | None:
    """What the pipeline publishes about its objects; None where it has no zones, lines or events (or no track).

    The counts start with the tracked labels at zero, or with every label of the model where the pipeline
    tracks them all, so that a subscriber finds a count for each label it may meet before one is met."""
    if not config.follows_objects:
        return None
    track = config.track
    assert track is not None
    return ObjectOutputs(
        pipeline=config.name,
        topics=topics,
        sink=sink,
        retained=retained.put,
        labels=track.labels or model_labels,
        zones=config.zones,
        lines=config.lines,
        events=config.events,
        findings_of=findings_of,
    )


def cascade_for(
    config: PipelineConfig, models: Sequence[StageModels], topics: Topics, sink: MessageSink
) -> Cascade | None:
    """The pipeline's cascade on the models acquired for its stages, in order; None without a cascade section."""
    if not config.cascade:
        return None
    if len(models) != len(config.cascade):
        raise ValueError(f"pipeline {config.name}: {len(config.cascade)} cascade stages, models for {len(models)}")
    tracked = config.track is not None and config.track.enabled
    stages = [
        CascadeStage(stage, loaded.model, decoder_of(loaded.model), loaded.batched, tracked)
        for stage, loaded in zip(config.cascade, models, strict=True)
    ]
    return Cascade(stages, sub_label_announcer(config.name, topics, sink) if tracked else None)


def sub_label_announcer(pipeline: str, topics: Topics, sink: MessageSink) -> SubLabelAssigned:
    """What tells subscribers that a tracked object got a sub-label: a message on its objects/<id>/update topic
    (schema: object_update.schema.json), spooled like events, since a subscriber acting on a name must hear it."""

    def announce(object_id: str, label: str, stage: str, sub_label: SubLabel, at: float) -> None:
        message = {
            "type": "sub_label",
            "id": object_id,
            "pipeline": pipeline,
            "label": label,
            "stage": stage,
            "sub_label": sub_label.label,
            "score": round(sub_label.score, 4),
            "frame_time": round(at, 3),
        }
        sink.publish(topics.object_update(pipeline, object_id), encode(message), EVENT_QOS, False)

    return announce


def input_spec_for(config: PipelineConfig, model: LoadedModel) -> InputSpec:
    """The manifest's first input spec with the pipeline's preprocessing overrides applied."""
    spec = model.input_specs[0]
    return config.preprocess.applied_to(spec) if config.preprocess is not None else spec


def decoder_for(config: PipelineConfig, model: LoadedModel) -> Decoder:
    """The manifest's decoder with the pipeline's overrides applied; raw outputs where the manifest names none."""
    manifest = model.package.manifest
    return decoder_of(model, config.decoder.applied_to(manifest.decoder) if config.decoder else manifest.decoder)


def decoder_of(model: LoadedModel, spec: DecoderSpec | None = None) -> Decoder:
    """The decoder `spec` names (default: the manifest's), with the package's labels; raw outputs without one."""
    manifest = model.package.manifest
    spec = spec or manifest.decoder
    return make_decoder(spec.name, spec.params, manifest.labels) if spec else make_decoder("raw", {})


def publish_policy(config: PipelineConfig) -> PublishPolicy:
    publish = config.publish
    snapshot = publish.snapshot
    return PublishPolicy(
        qos=publish.qos,
        retain=publish.retain,
        only_on_change=publish.only_on_change,
        min_score=publish.min_score,
        snapshot_interval_s=1.0 / snapshot.max_rate_hz if snapshot.enabled else None,
        jpeg_quality=snapshot.jpeg_quality,
    )


def describe_source(config: PipelineConfig) -> str:
    """The source as logs and result messages name it, e.g. 'stream:rtsp://admin:***@10.0.0.2/h264', or
    'shared:front-door' for the camera named front-door in `sources:`."""
    source = config.source
    if config.shared_source is not None:
        return f"shared:{config.shared_source}"
    for field in ("url", "device", "path", "port"):
        value = getattr(source, field, None)
        if value is not None:
            return f"{source.type}:{mask_url(str(value))}"
    topics = getattr(source, "topics", None)
    return f"{source.type}:{','.join(topics)}" if topics else source.type
