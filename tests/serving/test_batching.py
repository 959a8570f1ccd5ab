"""The inference queue on a real backend: every request gets its own answer once, directly or through the
queue, and a full queue refuses."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_runtime.backends.base import Outputs
from edge_runtime.errors import ModelMismatchError
from edge_runtime.package.loader import open_package
from edge_runtime.placement.model import LoadedModel, load_model
from edge_runtime.serving.batching import Batching, InferenceQueue, QueueFull, RequestTimedOut
from edge_runtime.serving.metrics import ModelMetrics


@pytest.fixture
def classifier(batch_classifier: Path) -> Iterator[LoadedModel]:
    model = load_model(open_package(batch_classifier), "onnx/fp32", "onnxruntime")
    yield model
    model.backend.close()


@pytest.fixture(params=["onnxruntime", "openvino"])
def any_classifier(batch_classifier: Path, request: pytest.FixtureRequest) -> Iterator[LoadedModel]:
    """The classifier on either kind of runner: ONNX Runtime's frees a slot after its callback, OpenVINO's before."""
    model = load_model(open_package(batch_classifier), "onnx/fp32", request.param)
    yield model
    model.backend.close()


def _capacity(model: LoadedModel) -> int:
    """The slots of the runner a queue gets for `model` (the backend's own count)."""
    runner = model.backend.async_runner(lambda *_: None)
    try:
        return runner.capacity
    finally:
        runner.close()


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


def test_a_request_that_finds_the_runner_idle_skips_the_queue(classifier: LoadedModel) -> None:
    metrics = ModelMetrics()
    queue = InferenceQueue("classifier", classifier, Batching(max_batch_size=0), metrics)
    samples = _samples(10)
    try:
        for key, sample in enumerate(samples):  # one at a time: each finds every slot idle and nothing queued
            answers = Answers(1)
            queue.submit([sample], answers.done_for(key))
            assert answers.wait()
            np.testing.assert_allclose(answers.outputs[key][0], classifier.backend.infer([sample])[0], rtol=1e-6)
    finally:
        queue.close()
    assert metrics.direct_count == len(samples)
    assert metrics.queue_ms == 0.0, "no request went through the batching thread"
    assert metrics.execution_count == len(samples)


def _held_until(
    release: threading.Event, answers: Answers
) -> Callable[[int], Callable[[Outputs | None, BaseException | None], None]]:
    """Callbacks that answer only once `release` is set: the ONNX runner holds a slot until its callback returns."""

    def held(key: int) -> Callable[[Outputs | None, BaseException | None], None]:
        done = answers.done_for(key)

        def wait_then_done(outputs: Outputs | None, error: BaseException | None) -> None:
            release.wait(30)
            done(outputs, error)

        return wait_then_done

    return held


def test_requests_queue_while_every_slot_is_busy_and_run_once_one_frees(classifier: LoadedModel) -> None:
    """The ONNX runner holds a slot until its callback returns: callbacks that wait keep every slot busy."""
    metrics = ModelMetrics()
    queue = InferenceQueue("classifier", classifier, Batching(max_batch_size=0, max_queue_size=100), metrics)
    capacity = _capacity(classifier)
    samples = _samples(capacity + 10)
    answers = Answers(len(samples))
    release = threading.Event()

    held = _held_until(release, answers)
    try:
        for key, sample in enumerate(samples):
            queue.submit([sample], held(key))  # never blocks, although the runner is full after `capacity`
        assert metrics.direct_count == capacity
        release.set()
        assert answers.wait()
    finally:
        release.set()
        queue.close()
    assert not answers.errors and sorted(answers.outputs) == list(range(len(samples)))
    for key, sample in enumerate(samples):
        np.testing.assert_allclose(answers.outputs[key][0], classifier.backend.infer([sample])[0], rtol=1e-6)
    assert metrics.direct_count == capacity and metrics.execution_count == len(samples)


def test_a_concurrent_burst_answers_every_request_exactly_once(any_classifier: LoadedModel) -> None:
    metrics = ModelMetrics()
    queue = InferenceQueue("classifier", any_classifier, Batching(max_batch_size=0, max_queue_size=1000), metrics)
    samples = _samples(400)
    calls: dict[int, int] = dict.fromkeys(range(len(samples)), 0)
    answers = Answers(len(samples))
    lock = threading.Lock()
    threads: set[str] = set()

    def counted(key: int) -> Callable[[Outputs | None, BaseException | None], None]:
        done = answers.done_for(key)

        def count_then_done(outputs: Outputs | None, error: BaseException | None) -> None:
            with lock:
                calls[key] += 1
                threads.add(threading.current_thread().name)
            done(outputs, error)

        return count_then_done

    def submit_share(first: int) -> None:
        for key in range(first, len(samples), 4):
            queue.submit([samples[key]], counted(key))

    submitters = [threading.Thread(target=submit_share, args=(first,)) for first in range(4)]
    try:
        for thread in submitters:
            thread.start()
        for thread in submitters:
            thread.join()
        assert answers.wait()
    finally:
        queue.close()
    assert set(calls.values()) == {1}, "a request lost or answered twice"
    assert not answers.errors
    assert threads and not any(name.startswith("batch-") for name in threads), "singles cross no batching thread"
    for key in range(0, len(samples), 37):
        np.testing.assert_allclose(answers.outputs[key][0], any_classifier.backend.infer([samples[key]])[0], rtol=1e-6)
    assert metrics.execution_count == len(samples) and 1 <= metrics.direct_count <= len(samples)


def test_asyncio_callers_get_their_own_answers_direct_or_queued(any_classifier: LoadedModel) -> None:
    metrics = ModelMetrics()
    queue = InferenceQueue("classifier", any_classifier, Batching(max_batch_size=0, max_queue_size=1000), metrics)
    samples = _samples(150)

    async def everything() -> list[Outputs]:
        return await asyncio.gather(*(queue.infer([sample]) for sample in samples))

    try:
        outputs = asyncio.run(everything())
    finally:
        queue.close()
    for sample, answer in zip(samples, outputs, strict=True):
        np.testing.assert_allclose(answer[0], any_classifier.backend.infer([sample])[0], rtol=1e-6)
    assert metrics.direct_count >= 1 and metrics.execution_count == len(samples)


def test_close_under_load_answers_every_accepted_request_once(any_classifier: LoadedModel) -> None:
    metrics = ModelMetrics()
    queue = InferenceQueue("classifier", any_classifier, Batching(max_batch_size=0, max_queue_size=100), metrics)
    sample = _samples(1)[0]
    lock = threading.Lock()
    calls: Counter[tuple[int, int]] = Counter()
    accepted: set[tuple[int, int]] = set()
    refused: list[BaseException] = []
    answered = threading.Semaphore(0)

    def done_for(key: tuple[int, int]) -> Callable[[Outputs | None, BaseException | None], None]:
        def done(outputs: Outputs | None, error: BaseException | None) -> None:
            with lock:
                calls[key] += 1
            answered.release()

        return done

    def submit_until_refused(thread: int) -> None:
        for index in itertools.count():
            key = (thread, index)
            try:
                queue.submit([sample], done_for(key))
            except QueueFull:
                time.sleep(0.001)
                continue
            except RuntimeError as error:  # the model stopped being served
                with lock:
                    refused.append(error)
                return
            with lock:
                accepted.add(key)

    submitters = [threading.Thread(target=submit_until_refused, args=(thread,)) for thread in range(3)]
    for thread in submitters:
        thread.start()
    for _ in range(50):  # under way: some answered, more coming
        assert answered.acquire(timeout=30)
    queue.close()
    for thread in submitters:
        thread.join(30)
        assert not thread.is_alive()
    assert len(refused) == len(submitters) and all("no longer served" in str(error) for error in refused)
    assert set(calls) == accepted, "an accepted request went unanswered, or a refused one was answered"
    assert set(calls.values()) == {1}, "a request answered twice"


def test_a_queued_single_past_its_deadline_is_answered_timed_out_when_a_slot_frees(classifier: LoadedModel) -> None:
    metrics = ModelMetrics()
    queue = InferenceQueue("classifier", classifier, Batching(max_batch_size=0), metrics)
    capacity = _capacity(classifier)
    samples = _samples(capacity + 1)
    answers = Answers(len(samples))
    release = threading.Event()

    held = _held_until(release, answers)
    try:
        for key in range(capacity):
            queue.submit([samples[key]], held(key))
        queue.submit([samples[capacity]], answers.done_for(capacity), timeout_ms=50)  # every slot is busy
        time.sleep(0.2)
        release.set()
        assert answers.wait()
    finally:
        release.set()
        queue.close()
    assert isinstance(answers.errors.get(capacity), RequestTimedOut)
    assert sorted(answers.outputs) == list(range(capacity))
    assert metrics.timed_out_in_queue == 1 and metrics.execution_count == capacity


def test_inputs_the_backend_refuses_are_answered_once_and_cost_no_slot(any_classifier: LoadedModel) -> None:
    metrics = ModelMetrics()
    queue = InferenceQueue("classifier", any_classifier, Batching(max_batch_size=0), metrics)
    capacity = _capacity(any_classifier)
    wrong = np.zeros((1, 3, 8, 8), np.float32)
    answers = Answers(capacity + 2)
    try:
        for key in range(capacity + 1):  # more refusals than slots: a slot kept by one would block the good request
            queue.submit([wrong], answers.done_for(key))
        queue.submit(_samples(1), answers.done_for(capacity + 1))
        assert answers.wait()
    finally:
        queue.close()
    assert sorted(answers.errors) == list(range(capacity + 1)) and list(answers.outputs) == [capacity + 1]
    assert all(isinstance(error, ModelMismatchError) for error in answers.errors.values())
    assert metrics.execution_failure == capacity + 1 and metrics.inference_count == 1
