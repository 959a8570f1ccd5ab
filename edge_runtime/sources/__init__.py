"""Input sources: cameras (V4L2, streams, files, folders) and sensors (MQTT, serial, replayed files).

One module per kind of source, each defining a `Source` subclass for one or more config `type`s,
registered in `SOURCES` by type; the class is imported on first use. A new source is a config class in
`configs.py`, one module here, and one line in `SOURCES`.
"""

from __future__ import annotations

from edge_runtime.config.registry import load_class
from edge_runtime.sources.base import Source, SourceConfig, SourceContext

__all__ = ["SOURCES", "make_source", "source_class"]

SOURCES: dict[str, tuple[str, str]] = {
    "v4l2": ("edge_runtime.sources.camera", "CameraSource"),
    "stream": ("edge_runtime.sources.camera", "CameraSource"),
    "file": ("edge_runtime.sources.camera", "CameraSource"),
    "shared": ("edge_runtime.sources.shared", "SharedSourceConsumer"),
    "folder": ("edge_runtime.sources.folder", "ImageFolderSource"),
    "mqtt": ("edge_runtime.sources.mqtt_sensor", "MqttSensor"),
    "serial": ("edge_runtime.sources.serial_sensor", "SerialSensor"),
    "replay": ("edge_runtime.sources.replay", "ReplaySensor"),
}


def source_class(source_type: str) -> type[Source]:
    return load_class("source type", source_type, SOURCES, Source)


def make_source(config: SourceConfig, name: str, context: SourceContext | None = None) -> Source:
    return source_class(str(getattr(config, "type", "")))(config, name, context)
