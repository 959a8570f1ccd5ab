"""A real serving stack for the tests: the daemon's model pool, real backends and uvicorn on a free port."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from model_builders import build_tiny_classifier_onnx

from edge_runtime.config.serving import ServeSettings
from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.topics import Topics
from edge_runtime.package.manifest import InputSpec, ModelFormat, Precision, Task
from edge_runtime.package.writer import describe_variant, write_package
from edge_runtime.placement.loading import Box, look_at_box
from edge_runtime.placement.model_pool import ModelPool
from edge_runtime.serving.service import Serving


@pytest.fixture(scope="session")
def box() -> Box:
    return look_at_box()


@pytest.fixture(scope="session")
def batch_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny classifier with a free batch dimension, as a package with an onnx/fp32 variant."""
    root = tmp_path_factory.mktemp("batch_classifier")
    (root / "onnx/fp32").mkdir(parents=True)
    build_tiny_classifier_onnx(root / "onnx/fp32/model.onnx", batch="N")
    variant = describe_variant(root, ["onnx/fp32/model.onnx"], ModelFormat.ONNX, Precision.FP32)
    spec = InputSpec(shape=(1, 3, 32, 32), layout="NCHW", color_order="RGB", mean=(127.5,), std=(64.0,))
    labels = tuple(f"class{i}" for i in range(10))
    write_package(
        root, {"onnx/fp32": variant}, name="classifier", task=Task.CLASSIFICATION, inputs=(spec,), labels=labels
    )
    return root


@pytest.fixture
def start_serving(box: Box, tmp_path: Path) -> Iterator[Callable[..., Serving]]:
    """Starts a Serving for `models` (config mappings) on a free loopback port; stopped after the test."""
    started: list[tuple[Serving, ModelPool]] = []

    def start(
        models: list[dict[str, Any]],
        connection: MqttConnection | None = None,
        topics: Topics | None = None,
        share_group: str | None = None,
        max_image_pixels: int | None = None,
        **http: Any,
    ) -> Serving:
        serve = {"http": {"port": 0, **http}, "models": models, "share_group": share_group}
        if max_image_pixels is not None:
            serve["max_image_pixels"] = max_image_pixels
        settings = ServeSettings.model_validate(serve)
        pool = ModelPool(box, tmp_path / "state", tmp_path / "cache")
        serving = Serving(settings, "test-box", pool, tmp_path / "config.yaml", connection, topics)
        started.append((serving, pool))
        serving.start()
        return serving

    yield start
    for serving, pool in started:
        serving.stop()
        pool.close()


@pytest.fixture(scope="session")
def face_package(face_package_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("face") / "face"
    shutil.copytree(face_package_dir, root)
    return root
