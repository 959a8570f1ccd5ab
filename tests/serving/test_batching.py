"""The inference queue on a real backend: every request gets its own answer, and a full queue refuses."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_runtime.backends.base import Outputs
from edge_runtime.package.loader import open_package
from edge_runtime.placement.model import LoadedModel, load_model
from edge_runtime.serving.batching import Batching, InferenceQueue, QueueFull
from edge_runtime.serving.metrics import ModelMetrics


@pytest.fixture
def classifier(batch_classifier: Path) -> Iterator[LoadedModel]:
    model = load_model(open_package(batch_classifier), "onnx/fp32", "onnxruntime")
    yield model
    model.backend.close()


class Answers:
    def __init__(self, expected: int) -> None:
        self.outputs: dict[int, Outputs] = {}
        self.errors: dict[int, BaseException] = {}
        self._left = expected
        self._all = threading.Event()
        self._lock = threading.Lock()

    def done_for(self, key: int) -> Callable[[Outputs | None, BaseException | None], None]:
        def done(outputs: Outputs | None, error: BaseException | None) -> None:
            if error is not None:
                self.errors[key] = error
            else:
                assert outputs is not None
                self.outputs[key] = outputs
            self.settled()

        return done

    def settled(self) -> None:
        """One request fewer to wait for: answered, or refused at the door."""
        with self._lock:
            self._left -= 1
            if self._left == 0:
                self._all.set()

    def wait(self, timeout: float = 30.0) -> bool:
        return self._all.wait(timeout)


def _samples(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(count)]


def test_requests_beyond_the_runners_slots_queue_and_each_gets_its_own_answer(classifier: LoadedModel) -> None:
    metrics = ModelMetrics()
    queue = InferenceQueue("classifier", classifier, Batching(max_batch_size=0, max_queue_size=1000), metrics)
    samples = _samples(200)
    answers = Answers(len(samples))
    try:
        for key, sample in enumerate(samples):
            queue.submit([sample], answers.done_for(key))
        assert answers.wait()
    finally:
        queue.close()
    assert not answers.errors
    for key, sample in enumerate(samples):
        np.testing.assert_allclose(answers.outputs[key][0], classifier.backend.infer([sample])[0], rtol=1e-6)
    assert metrics.execution_count == len(samples), "not joined: one execution per request"


def test_a_full_queue_refuses_at_once_while_the_runner_is_busy(classifier: LoadedModel) -> None:
    metrics = ModelMetrics()
    queue = InferenceQueue("classifier", classifier, Batching(max_batch_size=0, max_queue_size=2), metrics)
    samples = _samples(300)
    refused = 0
    accepted: list[int] = []
    answers = Answers(len(samples))
    try:
        for key, sample in enumerate(samples):
            try:
                queue.submit([sample], answers.done_for(key))
                accepted.append(key)
            except QueueFull:
                refused += 1
                answers.settled()
        assert answers.wait()
    finally:
        queue.close()
    assert refused > 0, "the runner's slots and a queue of 2 cannot take 300 requests sent at once"
    assert sorted(answers.outputs) == accepted
    assert metrics.rejected_full == refused
