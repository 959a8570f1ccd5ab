"""Moving pipelines onto the choice `select: fastest` stored for their model, between two frames.

The search (`edge_runtime.placement.fastest`) names a package by the key of its files. Every pipeline
set to `select: fastest` that runs those files loads the model again through the pool, which now takes
the stored choice, and swaps it in between two items as a rollout does: nothing is lost or run twice.
A pipeline whose new model fails to load or swap keeps the one it has.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from edge_runtime.config.schema import PipelineConfig
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.pipeline.build import decoder_for, input_spec_for
from edge_runtime.pipeline.streaming import Pipeline
from edge_runtime.placement.model_pool import ModelPool
from edge_runtime.placement.selection import model_key

__all__ = ["switch_to_stored_choice"]

log = logging.getLogger(__name__)


def switch_to_stored_choice(
    key: str,
    pipelines: Mapping[str, Pipeline],
    pipeline_config: Callable[[str], PipelineConfig],
    pool: ModelPool,
    config_file: Path,
) -> list[str]:
    """Swap the model of each pipeline set to `select: fastest` whose package has files `key`; returns
    the names of the pipelines switched."""
    switched = []
    for name, pipeline in pipelines.items():
        config = pipeline_config(name)
        if config.model.select != "fastest" or model_key(pipeline.model.package) != key:
            continue
        user = f"select-fastest:{name}"
        try:
            new = pool.acquire(user, config.model, config_file, unpaced=config.source.unpaced)
        except EdgeRuntimeError as error:
            log.warning("pipeline %s: the fastest choice does not load (%s); keeping its model", name, error)
            continue
        if new is pipeline.model:
            pool.release(user)
            continue
        try:
            pipeline.swap_model(new, decoder_for(config, new), input_spec_for(config, new))
        except Exception as error:  # the pipeline keeps its model; whatever the new one raised is only logged
            log.warning("pipeline %s: could not switch to the fastest choice (%s); keeping its model", name, error)
            pool.release(user)
            continue
        pool.release(name)
        pool.rename(user, name)
        log.info("pipeline %s: switched to the fastest faithful choice, %s", name, new.label)
        switched.append(name)
    return switched
