"""A cascade's models come from the model pool like any model: shared, described, released with the pipeline;
the batched twin is kept only where batches are sound (and, by default, pay on this box)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.config.schema import PipelineConfig
from edge_runtime.pipeline.cascade_models import acquire_cascade_models, cascade_users, release_cascade_models
from edge_runtime.placement.loading import look_at_box
from edge_runtime.placement.model_pool import ModelPool

REPO = Path(__file__).resolve().parents[2]
LANDMARKS = REPO / "samples" / "models" / "face_landmark"


@pytest.fixture
def pool(tmp_path: Path) -> ModelPool:
    return ModelPool(look_at_box(), tmp_path / "state", tmp_path / "cache")


def config(face_package_dir: Path, *stages: dict[str, Any]) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "name": "door",
            "source": {"type": "file", "path": "clip.mp4"},
            "model": {"path": str(face_package_dir)},
            "cascade": list(stages),
        }
    )


def users(pool: ModelPool) -> set[str]:
    return {user for described in pool.describe() for user in described["users"]}


def test_stage_models_are_pool_users_and_go_back_with_the_pipeline(pool: ModelPool, face_package_dir: Path) -> None:
    pipeline = config(
        face_package_dir,
        {"name": "landmarks", "model": {"path": str(LANDMARKS)}, "labels": ["face"], "batch": "always"},
        {"name": "mesh", "model": {"path": str(LANDMARKS)}, "labels": ["face"], "batch": "never"},
    )
    first, second = acquire_cascade_models(pool, pipeline, REPO / "config.yaml")
    assert first.batched is not None and first.batched.inputs[0].shape[0] is None  # the batch freed, and sound
    assert second.batched is None
    assert first.model is second.model  # one model and settings: loaded once, shared
    assert users(pool) == {*cascade_users("door", "landmarks"), cascade_users("door", "mesh")[0]}
    release_cascade_models(pool, "door", ["landmarks", "mesh"])
    assert pool.describe() == []


def test_a_model_that_folds_the_batch_runs_crops_side_by_side_even_when_batches_are_asked_for(
    pool: ModelPool, face_package_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """MediaPipe's face detector reshapes to a constant batch of one inside its graph: a batch of two fails."""
    pipeline = config(
        face_package_dir,
        {"name": "again", "model": {"path": str(face_package_dir)}, "labels": ["face"], "batch": "always"},
    )
    with caplog.at_level(logging.INFO, logger="edge_runtime.pipeline.cascade_models"):
        [stage] = acquire_cascade_models(pool, pipeline, REPO / "config.yaml")
    assert stage.batched is None
    assert "cascade stage again runs crops side by side: cannot be batched" in caplog.text
    assert users(pool) == {cascade_users("door", "again")[0]}


def test_a_stage_model_that_fails_to_load_leaves_nothing_acquired(pool: ModelPool, face_package_dir: Path) -> None:
    pipeline = config(
        face_package_dir,
        {"name": "landmarks", "model": {"path": str(LANDMARKS)}, "labels": ["face"], "batch": "never"},
        {"name": "gone", "model": {"path": "not-there"}, "labels": ["face"]},
    )
    with pytest.raises(Exception, match="not-there"):
        acquire_cascade_models(pool, pipeline, REPO / "config.yaml")
    assert pool.describe() == []
