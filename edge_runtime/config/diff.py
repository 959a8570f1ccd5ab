"""What a reload (SIGHUP) has to do: compare the running config with the new one, pipeline by pipeline.

Only enabled pipelines count, so disabling a pipeline reads as removing it and enabling one as adding
it. Settings every pipeline shares (the device id, the broker, the state and cache directories)
cannot change under running pipelines; a change there sets `restart_all` and lists every pipeline of
both configs as removed, added or changed. A pipeline on a camera named in `sources:` changes when that
camera's settings do.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_runtime.config.schema import DaemonConfig, PipelineConfig
from edge_runtime.sources.base import SourceConfig

SHARED_SETTINGS = ("device_id", "mqtt", "state_dir", "cache_dir")


@dataclass(frozen=True)
class PipelineDiff:
    added: tuple[str, ...]  # start these
    removed: tuple[str, ...]  # stop these
    changed: tuple[str, ...]  # stop, then start with the new config
    unchanged: tuple[str, ...]  # leave running
    restart_all: bool = False  # a shared setting changed: reconnect and restart every pipeline
    settings_changed: tuple[str, ...] = ()  # top-level settings that differ, pipelines aside

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.restart_all or self.settings_changed)


def diff_pipelines(old: DaemonConfig, new: DaemonConfig) -> PipelineDiff:
    before = _enabled_by_name(old)
    after = _enabled_by_name(new)
    settings = tuple(
        name for name in DaemonConfig.model_fields if name != "pipelines" and getattr(old, name) != getattr(new, name)
    )
    restart_all = any(name in SHARED_SETTINGS for name in settings)
    common = [name for name in after if name in before]
    changed = [
        name
        for name in common
        if restart_all
        or before[name] != after[name]
        or _named_source(old, before[name]) != _named_source(new, after[name])
    ]
    return PipelineDiff(
        added=tuple(name for name in after if name not in before),
        removed=tuple(name for name in before if name not in after),
        changed=tuple(changed),
        unchanged=tuple(name for name in common if name not in changed),
        restart_all=restart_all,
        settings_changed=settings,
    )


def _enabled_by_name(config: DaemonConfig) -> dict[str, PipelineConfig]:
    return {pipeline.name: pipeline for pipeline in config.enabled_pipelines}


def _named_source(config: DaemonConfig, pipeline: PipelineConfig) -> SourceConfig | None:
    """The camera in `sources:` the pipeline reads: changing it restarts every pipeline on it, while a pipeline
    added to or taken from a shared camera leaves the others on it running."""
    name = pipeline.shared_source
    return config.sources.get(name) if name is not None else None
