"""The daemon's config file: schema, loading with secrets, `check-config` diagnostics, reload diffs."""

from edge_runtime.config.diff import PipelineDiff, diff_pipelines
from edge_runtime.config.loading import load_config
from edge_runtime.config.problems import ConfigFileError
from edge_runtime.config.schema import (
    DaemonConfig,
    DecoderOverride,
    ModelConfig,
    PipelineConfig,
    PreprocessOverrides,
    PrometheusSettings,
    PublishSettings,
    SnapshotSettings,
    StatsSettings,
)

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
