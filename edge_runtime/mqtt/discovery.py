"""Home Assistant's MQTT discovery documents for the box and its pipelines: what Home Assistant shows of them.

Device-based discovery (Home Assistant 2024.11 and later): one retained document per device on
`<discovery_prefix>/device/edge_runtime_<device_id>/<box or pipeline_<name>>/config`, listing every entity
of the device under `components`. The box is one
device (the spool, the latest rollout and the release it brought), and each running pipeline another,
attached to it through `via_device`, with its counts, occupancy, pictures, line crossings and health.
One document per pipeline means a reload that drops a zone or a line sends the pipeline's document
without its entities, and Home Assistant removes them; a pipeline removed has its document deleted.

What Home Assistant accepts, checked against 2026.11 (docs/recipes/home-assistant.md):

- `origin` is mandatory in a device document; without it Home Assistant drops the whole document.
- The `device` block holds only keys Home Assistant knows: an unknown one there makes it reject the
  document, where unknown keys elsewhere are dropped silently. `model_id` and later additions are left
  out, so older versions take the document too.
- `default_entity_id` pins each entity id (Home Assistant 2025.10 and later; `object_id` is ignored by
  current versions). Before 2025.10 the ids follow the device and entity names instead.
- Availability follows the box's retained `online`/`offline` status topic, whose will the broker sends
  when the box goes away, so every entity turns `unavailable` with it.

Every state topic is one the box publishes anyway (see `mqtt.topics`); nothing here adds a message for
Home Assistant's sake, other than the documents. Names that come from the config or from a model's labels
enter templates only as quoted JSON strings and ids only as the characters Home Assistant allows, so a
label cannot change a template or a topic.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edge_runtime import __version__
from edge_runtime.mqtt.discovery_settings import HomeAssistantSettings
from edge_runtime.mqtt.topics import ALL_LABELS, Topics

if TYPE_CHECKING:
    from edge_runtime.config.schema import DaemonConfig, PipelineConfig

__all__ = [
    "MANUFACTURER",
    "MINIMUM_HOME_ASSISTANT",
    "ORIGIN",
    "PLATFORMS",
    "SWITCH_OFF",
    "SWITCH_ON",
    "Announcement",
    "announcement",
    "discovery_id",
    "entity_slug",
]

MINIMUM_HOME_ASSISTANT = "2024.11"  # device-based discovery
MANUFACTURER = "edge_runtime"
ORIGIN = {
    "name": "edge_runtime",
    "sw_version": __version__,
    "support_url": "https://github.com/edge-runtime/edge-runtime",
}
STATUS_ONLINE, STATUS_OFFLINE = "online", "offline"  # the box's status payloads (mqtt.connection)
SWITCH_ON, SWITCH_OFF = "ON", "OFF"  # a pipeline's enabled topic and its switch's commands
CROSSING_DIRECTIONS = ("in", "out")  # crossing.schema.json
PLATFORMS = frozenset({"sensor", "binary_sensor", "image", "event", "switch"})  # the kinds of entity the box announces


def discovery_id(*parts: str) -> str:
    """An id of the characters Home Assistant's discovery topic allows (`[a-zA-Z0-9_-]`), from `parts`.

    Names with other characters are written with `_` for them and a short digest of the original, so two
    names that differ only there ("a.b" and "a:b") never share an id."""
    text = "_".join(parts)
    safe = re.sub(r"[^a-zA-Z0-9_-]", "_", text)
    if safe != text:
        safe = f"{safe}_{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return safe


def entity_slug(*parts: str) -> str:
    """The part of an entity id after the domain, as Home Assistant's ids are made: lower case letters,
    digits and single underscores, neither first nor last.

    Two names that slug alike ("a-b", "a_b") get one suggestion; Home Assistant then numbers the second."""
    text = "_".join(parts)
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    return slug or f"x{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def _quoted(name: str) -> str:
    """`name` as a Jinja string literal: a name from a config or a model cannot break out of the template."""
    return json.dumps(name)


@dataclass(frozen=True)
class Announcement:
    """What the box tells Home Assistant: every discovery document by its topic."""

    documents: Mapping[str, dict[str, Any]]

    def payloads(self) -> dict[str, bytes]:
        return {topic: json.dumps(doc, separators=(",", ":")).encode() for topic, doc in self.documents.items()}


class _Device:
    """One device document being written: its components by id."""

    def __init__(self, topic: str, object_id: str, slug_base: str, device: dict[str, Any], topics: Topics) -> None:
        self.topic = topic
        self.object_id = object_id
        self.slug_base = slug_base
        self.document: dict[str, Any] = {
            "device": device,
            "origin": ORIGIN,
            "availability": [
                {"topic": topics.status, "payload_available": STATUS_ONLINE, "payload_not_available": STATUS_OFFLINE}
            ],
            "qos": 1,
            "components": {},
        }

    def add(self, platform: str, key: tuple[str, ...], name: str, **options: Any) -> None:
        assert platform in PLATFORMS, platform
        component = discovery_id(*key)
        if component in self.document["components"]:  # names that join alike ("a_b" + "c", "a" + "b_c")
            component = f"{component}_{hashlib.sha256(repr(key).encode()).hexdigest()[:8]}"
        self.document["components"][component] = {
            "platform": platform,
            "unique_id": f"{self.object_id}_{component}",
            "default_entity_id": f"{platform}.{entity_slug(self.slug_base, *key)}",
            "name": name,
            **options,
        }


def _topic(settings: HomeAssistantSettings, box_id: str, leaf: str) -> str:
    """A document's topic: every document of one box under one level (`edge_runtime_<device_id>`), so that a
    broker ACL can let each box write its own and no other's."""
    return f"{settings.discovery_prefix}/device/{box_id}/{leaf}/config"


def _box_device(settings: HomeAssistantSettings, config: DaemonConfig, topics: Topics) -> _Device:
    box_id = discovery_id("edge_runtime", config.device_id)
    device = {
        "identifiers": [f"edge_runtime|{config.device_id}"],
        "name": config.device_id,
        "manufacturer": MANUFACTURER,
        "model": "edge-runtime box",
        "sw_version": __version__,
    }
    box = _Device(_topic(settings, box_id, "box"), box_id, entity_slug(config.device_id), device, topics)
    stats = topics.stats
    box.add(
        "sensor",
        ("spool",),
        "Results waiting",
        state_topic=stats,
        value_template="{{ value_json.mqtt.spool_depth }}",
        state_class="measurement",
        entity_category="diagnostic",
        icon="mdi:tray-full",
    )
    box.add(
        "sensor",
        ("rollout",),
        "Last rollout",
        state_topic=stats,
        value_template="{{ value_json.rollout.stage | default('none') }}",
        entity_category="diagnostic",
        icon="mdi:package-up",
    )
    box.add(
        "sensor",
        ("release",),
        "Model release",
        state_topic=stats,
        value_template="{{ value_json.rollout.release | default('none') }}",
        entity_category="diagnostic",
        icon="mdi:tag",
    )
    return box


def _exposed_labels(pipeline: PipelineConfig, settings: HomeAssistantSettings) -> tuple[str, ...]:
    """The labels with entities of their own: those the settings name, else the tracked labels."""
    chosen = settings.entities_of(pipeline.name).labels
    if chosen is None:
        chosen = tuple(pipeline.track.labels) if pipeline.track is not None else ()
    return tuple(label for label in dict.fromkeys(chosen) if label != ALL_LABELS)


def _pipeline_device(
    settings: HomeAssistantSettings,
    config: DaemonConfig,
    pipeline: PipelineConfig,
    topics: Topics,
    box_id: str,
    running: bool = True,
) -> _Device:
    name = pipeline.name
    device = {
        "identifiers": [f"edge_runtime|{config.device_id}|{name}"],
        "name": f"{config.device_id} {name}",
        "manufacturer": MANUFACTURER,
        "model": "edge-runtime pipeline",
        "sw_version": __version__,
        "via_device": f"edge_runtime|{config.device_id}",
    }
    slug_base = entity_slug(config.device_id, name)
    topic = _topic(settings, box_id, discovery_id("pipeline", name))
    dev = _Device(topic, discovery_id(box_id, name), slug_base, device, topics)
    wanted = settings.entities_of(name)
    if pipeline.follows_objects and running:
        _add_objects(dev, pipeline, topics, settings)
    if wanted.health and running:
        in_report = f"value_json.pipelines[{_quoted(name)}]"
        present = f"{_quoted(name)} in value_json.pipelines"
        dev.add(
            "sensor",
            ("fps",),
            "Frames per second",
            state_topic=topics.stats,
            value_template=f"{{{{ {in_report}.fps_in if {present} else None }}}}",
            unit_of_measurement="fps",
            state_class="measurement",
            suggested_display_precision=1,
            entity_category="diagnostic",
            icon="mdi:speedometer",
        )
        dev.add(
            "sensor",
            ("inference_latency",),
            "Inference latency",
            state_topic=topics.stats,
            value_template=f"{{{{ {in_report}.latency_ms.infer.p50 | default(None) if {present} else None }}}}",
            unit_of_measurement="ms",
            device_class="duration",
            state_class="measurement",
            entity_category="diagnostic",
        )
        dev.add(
            "sensor",
            ("model",),
            "Model",
            state_topic=topics.model(name),
            value_template="{{ value_json.name }} {{ value_json.version }}",
            entity_category="diagnostic",
            icon="mdi:brain",
        )
    return dev


def _add_objects(
    dev: _Device,
    pipeline: PipelineConfig,
    topics: Topics,
    settings: HomeAssistantSettings,
) -> None:
    """Counts and occupancy per label and per zone, pictures per label, crossings and totals per line."""
    name = pipeline.name
    wanted = settings.entities_of(name)
    labels = _exposed_labels(pipeline, settings)
    occupied = "{{ 'ON' if value | int(0) > 0 else 'OFF' }}"
    if wanted.counts:
        dev.add("sensor", ("count",), "Objects", state_topic=topics.count(name, ALL_LABELS), state_class="measurement")
    if wanted.occupancy:
        dev.add(
            "binary_sensor",
            ("occupancy",),
            "Occupancy",
            state_topic=topics.count(name, ALL_LABELS),
            value_template=occupied,
            device_class="occupancy",
        )
    for label in labels:
        if wanted.counts:
            dev.add(
                "sensor",
                ("count", label),
                f"{label} count",
                state_topic=topics.count(name, label),
                state_class="measurement",
            )
        if wanted.occupancy:
            dev.add(
                "binary_sensor",
                ("occupancy", label),
                f"{label} occupancy",
                state_topic=topics.count(name, label),
                value_template=occupied,
                device_class="occupancy",
            )
    events = pipeline.events
    pictures = events is not None and events.enabled and events.snapshot.enabled
    if wanted.snapshots and pictures and events is not None:
        for label in labels:
            if not events.labels or label in events.labels:
                dev.add(
                    "image",
                    ("snapshot", label),
                    f"{label} snapshot",
                    image_topic=topics.label_snapshot(name, label),
                    content_type="image/jpeg",
                )
    if wanted.zones:
        for zone, zone_config in pipeline.zones.items():
            if wanted.occupancy:
                dev.add(
                    "binary_sensor",
                    ("zone", zone, "occupancy"),
                    f"{zone} occupancy",
                    state_topic=topics.zone_occupied(name, zone),
                    device_class="occupancy",
                )
            if wanted.counts:
                dev.add(
                    "sensor",
                    ("zone", zone, "count"),
                    f"{zone} count",
                    state_topic=topics.zone_count(name, zone, ALL_LABELS),
                    state_class="measurement",
                )
                for label in labels:
                    if not zone_config.labels or label in zone_config.labels:
                        dev.add(
                            "sensor",
                            ("zone", zone, "count", label),
                            f"{zone} {label} count",
                            state_topic=topics.zone_count(name, zone, label),
                            state_class="measurement",
                        )
    if wanted.lines:
        for line in pipeline.lines:
            dev.add(
                "event",
                ("line", line),
                f"{line} crossing",
                state_topic=topics.line_crossing(name, line),
                event_types=list(CROSSING_DIRECTIONS),
                value_template="{{ {'event_type': value_json.direction, 'label': value_json.label, "
                "'track_id': value_json.track_id} | tojson }}",
                icon="mdi:transit-transfer",
            )
            for direction in CROSSING_DIRECTIONS:
                dev.add(
                    "sensor",
                    ("line", line, direction),
                    f"{line} {direction}",
                    state_topic=topics.line_totals(name, line),
                    value_template=f"{{{{ value_json[{_quoted(direction)}] }}}}",
                    state_class="total_increasing",
                )


def announcement(
    settings: HomeAssistantSettings, config: DaemonConfig, topics: Topics, switched_off: Collection[str] = ()
) -> Announcement:
    """Every discovery document for `config`'s box and its running pipelines. With `settings.controls`, each
    pipeline also has a switch, and a pipeline in `switched_off` (turned off by its switch or a command, and
    so not running) keeps a device with its switch alone, to be turned on again."""
    box = _box_device(settings, config, topics)
    documents = {box.topic: box.document}
    for pipeline in config.pipelines:
        running = pipeline.enabled
        if not running and not (settings.controls and pipeline.name in switched_off):
            continue
        dev = _pipeline_device(settings, config, pipeline, topics, box.object_id, running)
        if settings.controls:
            dev.add(
                "switch",
                ("enabled",),
                "Running",
                state_topic=topics.enabled(pipeline.name),
                command_topic=topics.enabled_set(pipeline.name),
                payload_on=SWITCH_ON,
                payload_off=SWITCH_OFF,
                entity_category="config",
            )
        documents[dev.topic] = dev.document
    return Announcement(documents)
