"""The daemon's config file: schema, loading with secrets, `check-config` diagnostics, reload diffs.

The names below load on first use, so that `edge_runtime.config.base` (the strict base model every
other package builds on) can be imported without pulling in the whole schema, which itself imports
those packages.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edge_runtime.config.diff import PipelineDiff, diff_pipelines
    from edge_runtime.config.loading import load_config
    from edge_runtime.config.model import ModelConfig
    from edge_runtime.config.problems import ConfigFileError
    from edge_runtime.config.schema import (
        DaemonConfig,
        DecoderOverride,
        PipelineConfig,
        PreprocessOverrides,
        PrometheusSettings,
        PublishSettings,
        SnapshotSettings,
        StatsSettings,
    )

_EXPORTS = {
    "ConfigFileError": "edge_runtime.config.problems",
    "DaemonConfig": "edge_runtime.config.schema",
    "DecoderOverride": "edge_runtime.config.schema",
    "ModelConfig": "edge_runtime.config.model",
    "PipelineConfig": "edge_runtime.config.schema",
    "PipelineDiff": "edge_runtime.config.diff",
    "PreprocessOverrides": "edge_runtime.config.schema",
    "PrometheusSettings": "edge_runtime.config.schema",
    "PublishSettings": "edge_runtime.config.schema",
    "SnapshotSettings": "edge_runtime.config.schema",
    "StatsSettings": "edge_runtime.config.schema",
    "diff_pipelines": "edge_runtime.config.diff",
    "load_config": "edge_runtime.config.loading",
}

__all__ = [
    "ConfigFileError",
    "DaemonConfig",
    "DecoderOverride",
    "ModelConfig",
    "PipelineConfig",
    "PipelineDiff",
    "PreprocessOverrides",
    "PrometheusSettings",
    "PublishSettings",
    "SnapshotSettings",
    "StatsSettings",
    "diff_pipelines",
    "load_config",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
