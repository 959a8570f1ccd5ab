"""Probation on a live pipeline: a healthy model passes, and each kind of trouble fails it at once, named."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from live_rollout import Camera

from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.base import Decoder
from edge_runtime.mqtt.topics import Topics
from edge_runtime.package.loader import open_package
from edge_runtime.pipeline.outputs import PublishPolicy
from edge_runtime.pipeline.streaming import Pipeline
from edge_runtime.placement.model import LoadedModel, load_model
from edge_runtime.rollout.probation import ProbationLimits, watch


class SlowDecoder:
    """The model's own decoder, slowed or broken on purpose."""

    def __init__(
        self, decoder: Decoder, delay: float = 0.0, fail: bool = False, gate: threading.Event | None = None
    ) -> None:
        self._decoder, self._delay, self._fail, self._gate = decoder, delay, fail, gate

    def decode(self, outputs: Any, specs: Any, transform: Any) -> Any:
        time.sleep(self._delay)
        if self._gate is not None:
            self._gate.wait()
        if self._fail:
            raise ValueError("this decoder fails on purpose")
        return self._decoder.decode(outputs, specs, transform)


@pytest.fixture(scope="module")
def model(face_package_dir: Path) -> Iterator[LoadedModel]:
    loaded = load_model(open_package(face_package_dir), "openvino/fp32", "openvino", {"precision": "fp32"})
    yield loaded
    loaded.close()


def start(model: LoadedModel, image: np.ndarray, fps: float, decoder: Any) -> Pipeline:
    pipeline = Pipeline(
        name="faces", topics=Topics("edge", "box"), source=Camera(image, fps), model=model, decoder=decoder,
        input_spec=model.input_specs[0], policy=PublishPolicy(), sink=_Sink(),
    )  # fmt: skip
    pipeline.start()
    return pipeline


class _Sink:
    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        pass


def face_decoder(model: LoadedModel) -> Decoder:
    spec = model.package.manifest.decoder
    assert spec is not None
    return make_decoder(spec.name, spec.params, model.package.manifest.labels)


def test_a_healthy_model_passes_its_probation(model: LoadedModel, astronaut_bgr: np.ndarray) -> None:
    pipeline = start(model, astronaut_bgr, 30, face_decoder(model))
    try:
        verdict = watch(pipeline, ProbationLimits(seconds=1.0))
    finally:
        pipeline.stop()
    assert verdict.passed, verdict.reason
    assert verdict.errors == 0 and verdict.results >= 20 and verdict.seconds >= 1.0


def test_errors_fail_probation_at_once(model: LoadedModel, astronaut_bgr: np.ndarray) -> None:
    pipeline = start(model, astronaut_bgr, 30, SlowDecoder(face_decoder(model), fail=True))
    try:
        verdict = watch(pipeline, ProbationLimits(seconds=30.0))
    finally:
        pipeline.stop()
    assert not verdict.passed and verdict.seconds < 5.0
    assert re.fullmatch(r"\d+ errors in [\d.]+ s of probation \(at most 0\)", verdict.reason), verdict.reason


def test_a_model_too_slow_for_the_camera_fails_on_pace(model: LoadedModel, astronaut_bgr: np.ndarray) -> None:
    pipeline = start(model, astronaut_bgr, 100, SlowDecoder(face_decoder(model), delay=0.05))  # ~20 results/s
    try:
        verdict = watch(pipeline, ProbationLimits(seconds=1.5))
    finally:
        pipeline.stop()
    assert not verdict.passed and verdict.errors == 0
    assert "items the source produced: the model keeps up with" in verdict.reason


def test_a_stalled_pipeline_fails_on_progress(model: LoadedModel, astronaut_bgr: np.ndarray) -> None:
    pipeline = start(model, astronaut_bgr, 30, face_decoder(model))
    gate = threading.Event()
    stalled = SlowDecoder(face_decoder(model), gate=gate)
    try:
        time.sleep(0.3)
        pipeline.swap_model(model, stalled, model.input_specs[0])  # the same model, its decoder now hanging
        verdict = watch(pipeline, ProbationLimits(seconds=30.0, stall_seconds=1.0))
    finally:
        gate.set()
        pipeline.stop()
    assert not verdict.passed and verdict.reason.startswith("no result for ")
    assert verdict.seconds < 5.0


def test_stop_ends_probation_as_a_failure(model: LoadedModel, astronaut_bgr: np.ndarray) -> None:
    pipeline = start(model, astronaut_bgr, 30, face_decoder(model))
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    try:
        verdict = watch(pipeline, ProbationLimits(seconds=30.0), stop)
    finally:
        pipeline.stop()
    assert not verdict.passed and verdict.reason == "probation was stopped"
