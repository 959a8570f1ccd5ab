"""The parts of a config that the checks against the box look at, taken from whatever validated.

A file with a schema error in one place still names files, devices, models and directories elsewhere.
Checking those in the same run, rather than after the schema errors are fixed, shows a user everything
wrong at once. So when the whole config does not validate, each section, each pipeline and each served
model is validated on its own, and within a broken pipeline its source and its model; what validates is
checked, what does not is already reported by the schema.

Relative paths anywhere are made relative to the config file's directory here, as `load_config` does
for a valid config, so that the checks see the paths `run` would use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from edge_runtime.config.control import ControlSettings
from edge_runtime.config.model import ModelConfig
from edge_runtime.config.problems import FieldPath
from edge_runtime.config.schema import DaemonConfig, PipelineConfig, PrometheusSettings, StatsSettings
from edge_runtime.config.serving import HttpSettings, ServedModelConfig, ServeSettings
from edge_runtime.config.trust import TrustSettings
from edge_runtime.mqtt.settings import MqttSettings, SpoolSettings, TlsSettings
from edge_runtime.sources.base import SourceConfig
from edge_runtime.sources.configs import AnySource, Camera, NamedSource

__all__ = ["ConfigParts", "PipelinePart", "parts_of", "resolve_paths", "salvage_parts"]

M = TypeVar("M", bound=BaseModel)
_SOURCE: TypeAdapter[SourceConfig] = TypeAdapter(AnySource)
_NAMED_SOURCE: TypeAdapter[Camera] = TypeAdapter(NamedSource)
_PATH: TypeAdapter[Path] = TypeAdapter(Path)
_BOOL: TypeAdapter[bool] = TypeAdapter(bool)


@dataclass(frozen=True)
class PipelinePart:
    """An enabled pipeline: all of it where it validated, else the source and the model if they did."""

    index: int
    name: str
    source: SourceConfig | None
    model: ModelConfig | None
    whole: PipelineConfig | None = None

    @property
    def at(self) -> FieldPath:
        return ("pipelines", self.index)


@dataclass(frozen=True)
class ConfigParts:
    pipelines: tuple[PipelinePart, ...] = ()
    sources: tuple[tuple[str, Camera], ...] = ()  # the named sources that validated
    source_names: tuple[str, ...] = ()  # every name in `sources:`, valid or not: a reference to one is no typo
    served: tuple[tuple[int, ServedModelConfig], ...] = ()
    http: HttpSettings | None = None  # only where a serve section is given
    prometheus: PrometheusSettings | None = None
    tls: TlsSettings | None = None
    spool: SpoolSettings | None = None
    trust: TrustSettings | None = None
    control: ControlSettings | None = None
    state_dir: Path | None = None
    cache_dir: Path | None = None


def parts_of(config: DaemonConfig) -> ConfigParts:
    """The parts of a config that validated as a whole (its paths already resolved)."""
    serve = config.serve
    pipelines = tuple(
        PipelinePart(index, p.name, p.source, p.model, p) for index, p in enumerate(config.pipelines) if p.enabled
    )
    return ConfigParts(
        pipelines=pipelines,
        sources=tuple(config.sources.items()),
        source_names=tuple(config.sources),
        served=tuple(enumerate(serve.models)) if serve is not None else (),
        http=serve.http if serve is not None else None,
        prometheus=config.stats.prometheus,
        tls=config.mqtt.tls,
        spool=config.mqtt.spool,
        trust=config.trust,
        control=config.control,
        state_dir=config.state_dir,
        cache_dir=config.cache_dir,
    )


def salvage_parts(data: dict[str, Any], base: Path) -> ConfigParts:
    """The parts of a config that failed validation which validate on their own, paths resolved against `base`."""
    served, http = _serve(data.get("serve"), base)
    stats = _valid(StatsSettings, data.get("stats", {}), base)
    prometheus = stats.prometheus if stats else _valid(PrometheusSettings, _get(data, "stats", "prometheus"), base)
    mqtt = _valid(MqttSettings, data.get("mqtt", {}), base)
    tls = mqtt.tls if mqtt else _valid(TlsSettings, _get(data, "mqtt", "tls"), base)
    spool = mqtt.spool if mqtt else _valid(SpoolSettings, _get(data, "mqtt", "spool"), base)
    named = data.get("sources")
    named = named if isinstance(named, dict) else {}
    return ConfigParts(
        pipelines=_pipelines(data.get("pipelines"), base),
        sources=tuple(
            (name, source) for name, item in named.items() if (source := _valid_named_source(item, base)) is not None
        ),
        source_names=tuple(str(name) for name in named),
        served=served,
        http=http,
        prometheus=prometheus,
        tls=tls,
        spool=spool,
        trust=_valid(TrustSettings, data.get("trust", {}), base),
        control=_valid(ControlSettings, data.get("control", {}), base),
        state_dir=_path(data.get("state_dir"), base),
        cache_dir=_path(data.get("cache_dir"), base),
    )


def _pipelines(items: Any, base: Path) -> tuple[PipelinePart, ...]:
    if not isinstance(items, list):
        return ()
    parts = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not _enabled(item.get("enabled", True)):
            continue  # disabled, or not known to be enabled: `run` would not start it
        whole = _valid(PipelineConfig, item, base)
        name = item.get("name")
        label = name if isinstance(name, str) else f"#{index}"
        if whole is not None:
            parts.append(PipelinePart(index, whole.name, whole.source, whole.model, whole))
            continue
        source = _valid_source(item.get("source"), base)
        parts.append(PipelinePart(index, label, source, _valid(ModelConfig, item.get("model"), base)))
    return tuple(parts)


def _serve(data: Any, base: Path) -> tuple[tuple[tuple[int, ServedModelConfig], ...], HttpSettings | None]:
    """The served models that validate and the http settings, where a serve section is given."""
    if data is None:
        return (), None
    serve = _valid(ServeSettings, data, base)
    if serve is not None:
        return tuple(enumerate(serve.models)), serve.http
    models = _get(data, "models")
    served = tuple(
        (index, model)
        for index, item in enumerate(models if isinstance(models, list) else [])
        if (model := _valid(ServedModelConfig, item, base)) is not None
    )
    return served, _valid(HttpSettings, _get(data, "http") or {}, base)


def _enabled(value: Any) -> bool:
    try:
        return _BOOL.validate_python(value)
    except ValidationError:
        return False


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _valid(model: type[M], data: Any, base: Path) -> M | None:
    if data is None:
        return None
    try:
        return resolve_paths(model.model_validate(data), base)
    except ValidationError:
        return None


def _valid_source(data: Any, base: Path) -> SourceConfig | None:
    if isinstance(data, str):  # the name of a camera in `sources:`, as the schema reads it
        data = {"type": "shared", "name": data}
    try:
        return resolve_paths(_SOURCE.validate_python(data), base)
    except ValidationError:
        return None


def _valid_named_source(data: Any, base: Path) -> Camera | None:
    try:
        return resolve_paths(_NAMED_SOURCE.validate_python(data), base)
    except ValidationError:
        return None


def _path(data: Any, base: Path) -> Path | None:
    try:
        path = _PATH.validate_python(data)
    except ValidationError:
        return None
    return path if path.is_absolute() else base / path


def resolve_paths(model: M, base: Path) -> M:
    """`model` with every relative Path field, at any depth, made relative to `base`."""
    update: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        resolved = _resolve_value(value, base)
        if resolved is not value:
            update[name] = resolved
    return model.model_copy(update=update) if update else model


def _resolve_value(value: Any, base: Path) -> Any:
    if isinstance(value, Path):
        return value if value.is_absolute() else base / value
    if isinstance(value, BaseModel):
        return resolve_paths(value, base)
    if isinstance(value, dict) and any(isinstance(item, (BaseModel, Path)) for item in value.values()):
        resolved = {key: _resolve_value(item, base) for key, item in value.items()}
        return resolved if any(resolved[key] is not value[key] for key in value) else value
    if isinstance(value, tuple) and any(isinstance(item, (BaseModel, Path)) for item in value):
        items = tuple(_resolve_value(item, base) for item in value)
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value
