"""The models of a pipeline's cascade, taken from the model pool like the pipeline's own model.

Each stage's model goes through `ModelPool.acquire`, so a stage gets what any model gets: the device
profile's choice of backend and device, a pinned precision or variant, the fidelity guard, the release a
rollout made active, and sharing with every other user of the same model and settings. Where the stage
may batch, the model is acquired a second time with its batch dimension freed (`dynamic_batch`, as a served
model's is), and kept only where `serving.batch_choice` keeps it for a served model: the backend really
freed it, a batch of two gives each crop the answer it gets alone, and (with `batch: faster`) batches of
`max_crops` run faster than crops side by side on this box, measured once per box and remembered in the
state directory. On a small CPU they often do not: the runner's requests keep its cores busy already.
Otherwise the stage runs its crops side by side and says why once.

Each stage's users in the pool are `<pipeline>/cascade/<stage>` and `<pipeline>/cascade/<stage>/batched`,
so `describe` shows who uses what, and stopping the pipeline releases exactly these.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from edge_runtime.config import PipelineConfig
from edge_runtime.placement.model import LoadedModel
from edge_runtime.placement.model_pool import ModelPool
from edge_runtime.serving.batch_choice import BatchChoices

log = logging.getLogger(__name__)

__all__ = ["StageModels", "acquire_cascade_models", "cascade_users", "release_cascade_models"]


@dataclass(frozen=True)
class StageModels:
    """A stage's model as exported, and the same model with its batch freed where batches are sound (else None)."""

    model: LoadedModel
    batched: LoadedModel | None


def cascade_users(pipeline: str, stage: str) -> tuple[str, str]:
    """The pool's names for a stage's model and for its batched twin."""
    single = f"{pipeline}/cascade/{stage}"
    return single, f"{single}/batched"


def acquire_cascade_models(pool: ModelPool, config: PipelineConfig, config_file: Path) -> list[StageModels]:
    """Each stage's models, in the order of the section; on a failure, those acquired so far are released."""
    acquired: list[StageModels] = []
    try:
        for stage in config.cascade:
            single_user, batched_user = cascade_users(config.name, stage.name)
            model = pool.acquire(single_user, stage.model, config_file, unpaced=config.source.unpaced)
            batched = None
            if stage.batch != "never" and stage.max_crops > 1:
                batched = pool.acquire(
                    batched_user, stage.model, config_file, unpaced=True, options={"dynamic_batch": True}
                )
                choice = BatchChoices(pool.state_dir).choose(batched, stage.max_crops, stage.batch, single=model)
                name = f"pipeline {config.name}: cascade stage {stage.name}"
                if choice.max_batch_size == 0:
                    log.info("%s runs crops side by side: %s", name, choice.reason)
                    pool.release(batched_user)
                    batched = None
                else:
                    log.info("%s runs a frame's crops as one batch: %s", name, choice.reason)
            acquired.append(StageModels(model, batched))
    except BaseException:
        release_cascade_models(pool, config.name, [stage.name for stage in config.cascade])
        raise
    return acquired


def release_cascade_models(pool: ModelPool, pipeline: str, stages: Sequence[str]) -> None:
    """Give the pool back every model the stages took (a user that took none is no matter)."""
    for stage in stages:
        for user in cascade_users(pipeline, stage):
            pool.release(user)
