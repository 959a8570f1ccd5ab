"""Input sources: cameras (V4L2, streams, files, folders) and sensors (MQTT, serial, replayed files).

One module per kind of source, each defining a `Source` subclass for one or more config `type`s;
`make_source` finds it by the config's type. A new source is a config class in `configs.py`, one
module here, and one line in `_MODULES`.
"""

from __future__ import annotations

import importlib

from edge_runtime.errors import ConfigError
from edge_runtime.sources.base import Source, SourceConfig, SourceContext

_MODULES: dict[str, str] = {
    "v4l2": "edge_runtime.sources.camera",
    "stream": "edge_runtime.sources.camera",
    "file": "edge_runtime.sources.camera",
    "folder": "edge_runtime.sources.folder",
    "mqtt": "edge_runtime.sources.mqtt_sensor",
    "serial": "edge_runtime.sources.serial_sensor",
    "replay": "edge_runtime.sources.replay",
}


def make_source(config: SourceConfig, name: str, context: SourceContext | None = None) -> Source:
    source_type = str(getattr(config, "type", ""))
    if source_type not in _MODULES:
        raise ConfigError(f"unknown source type {source_type!r}; known: {', '.join(sorted(_MODULES))}")
    module = importlib.import_module(_MODULES[source_type])
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, Source) and source_type in getattr(value, "types", ()):
            return value(config, name, context)
    raise ConfigError(f"module {_MODULES[source_type]} defines no source for type {source_type!r}")
