"""One queue per served model: requests from HTTP and MQTT meet here and leave for the backend in batches.

Triton's rule decides when a batch leaves: as soon as it holds `max_batch_size` samples, or when its
oldest request has waited `max_queue_delay_ms`, whichever comes first. A batch is the requests' inputs
joined along the first dimension and submitted to the model's async runner, so several batches (or,
without batching, several single requests) are in flight at once, as OpenVINO's throughput streams
want; the runner blocks while it is full, and the queue behind it fills instead.

A model served without batches needs no batching thread, and has none: a request that finds nothing
queued and a runner slot idle is started by the caller's own thread (the event loop, an MQTT worker),
never waiting (`AsyncRunner.try_submit`); one that finds every slot busy is queued, and started by the
runner's own thread as soon as a slot comes free (`AsyncRunner.on_idle`), before that thread hands the
finished request's answer back. Each thread a request crosses costs a wake-up and a turn for the GIL,
a large share of the time of a model that runs in a millisecond; this way a request crosses only the
two that any asynchronous runner needs (to it, and back).

Admission is decided at the door: a queue already holding `max_queue_size` requests refuses the next
at once (`QueueFull`: HTTP 503 with Retry-After), rather than letting every client wait longer. The door
is before the work: a transport `reserve`s a place as soon as it knows the model, before it reads or
decodes the body, so a burst is refused while it costs nothing, and the places held by requests still
arriving count as queued. A request carries its deadline; one still queued when it passes is answered as
timed out and never runs.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from edge_runtime.backends.base import AsyncRunner, Outputs
from edge_runtime.placement.model import LoadedModel
from edge_runtime.serving.metrics import ModelMetrics

__all__ = ["Batching", "InferenceQueue", "Place", "QueueFull", "RequestTimedOut"]

log = logging.getLogger(__name__)

Done = Callable[[Outputs | None, BaseException | None], None]


class QueueFull(Exception):  # noqa: N818 - a refusal the caller answers, like Triton's "queue full"
    def __init__(self, model: str, size: int) -> None:
        super().__init__(f"model {model}: {size} requests already wait; try again shortly")
        self.model = model
        self.size = size


class RequestTimedOut(Exception):  # noqa: N818 - a refusal the caller answers
    def __init__(self, model: str, waited_ms: float) -> None:
        super().__init__(f"model {model}: the request timed out after {waited_ms:.0f} ms in the queue")
        self.model = model
        self.waited_ms = waited_ms


@dataclass(frozen=True)
class Batching:
    """How a served model's requests are queued and joined; see the module docstring."""

    max_batch_size: int = 0  # 0: requests are not joined, each runs on its own (several in flight)
    max_queue_delay_ms: float = 0.0
    max_queue_size: int = 64
    timeout_ms: float = 10_000.0


@dataclass
class _Request:
    inputs: list[np.ndarray]  # in the model's input order; the first dimension is the request's batch
    size: int
    done: Done
    queued_at: float  # time.monotonic()
    deadline: float


@dataclass
class _Batch:
    requests: list[_Request]
    started: float = field(default_factory=time.perf_counter)


class Place:
    """A place `InferenceQueue.reserve` holds for one request, until `submit` takes it or it is released."""

    def __init__(self, queue: InferenceQueue) -> None:
        self.queue = queue
        self._held = True

    def taken(self) -> bool:
        """Hand the place over to the queue (once): True if it was still held."""
        held, self._held = self._held, False
        return held

    def release(self) -> None:
        """Give the place back, if no request took it."""
        if self.taken():
            self.queue._give_back()

    def __enter__(self) -> Place:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


class InferenceQueue:
    """A served model's queue, and the thread that forms its batches where requests are joined; `submit` and
    `infer` are thread-safe."""

    def __init__(self, name: str, model: LoadedModel, batching: Batching, metrics: ModelMetrics) -> None:
        self.name = name
        self.model = model
        self.batching = batching
        self.metrics = metrics
        self._pending: deque[_Request] = deque()
        self._reserved = 0  # places held for requests still being read or decoded
        self._samples = 0  # samples queued, for the "batch is full" rule
        self._wake = threading.Condition()
        self._closed = False
        self._runner: AsyncRunner = model.backend.async_runner(self._finished)
        self._thread: threading.Thread | None = None
        if batching.max_batch_size <= 1:  # requests never joined: started as slots come free, by whoever frees one
            self._runner.on_idle = self._start_queued
        else:
            self._thread = threading.Thread(target=self._form_batches, name=f"batch-{name}", daemon=True)
            self._thread.start()

    # -- the door -------------------------------------------------------------------------------------

    def reserve(self) -> Place:
        """Hold a place for a request whose body is still to be read or decoded; QueueFull at once when the
        places held and the requests queued already make `max_queue_size`. `submit(..., place=...)` takes the
        place; a request that never gets there gives it back (`Place.release`, or leaving its `with`)."""
        with self._wake:
            if self._closed:
                raise RuntimeError(f"model {self.name} is no longer served")
            self._check_room()
            self._reserved += 1
        return Place(self)

    def submit(
        self, inputs: Sequence[np.ndarray], done: Done, timeout_ms: float | None = None, *, place: Place | None = None
    ) -> None:
        """Queue one request, or start it at once; `done(outputs, error)` is called once, from another thread
        (or from this one, before `submit` returns, when the backend refuses the inputs at once). Raises QueueFull.

        With `place`, the request takes the place `reserve` held for it (also when this raises)."""
        now = time.monotonic()
        timeout = self.batching.timeout_ms if timeout_ms is None else min(timeout_ms, self.batching.timeout_ms)
        size = int(inputs[0].shape[0]) if self.batching.max_batch_size > 0 and inputs[0].ndim else 1
        request = _Request(list(inputs), size, done, now, now + timeout / 1000)
        reserved = place is not None and place.queue is self and place.taken()  # (a release may have swapped queues)
        with self._wake:
            if reserved:
                self._reserved -= 1
            if self._closed:
                raise RuntimeError(f"model {self.name} is no longer served")
            if not reserved:
                self._check_room()
            if self._thread is None and not self._pending and self._start(request):
                self.metrics.started_directly()
                return
            self._pending.append(request)
            self._samples += size
            self._wake.notify()

    async def infer(
        self, inputs: Sequence[np.ndarray], timeout_ms: float | None = None, *, place: Place | None = None
    ) -> Outputs:
        """`submit` for asyncio callers: the outputs, or the error raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outputs] = loop.create_future()

        def done(outputs: Outputs | None, error: BaseException | None) -> None:
            loop.call_soon_threadsafe(_settle, future, outputs, error)

        self.submit(inputs, done, timeout_ms, place=place)
        return await future

    def _start(self, request: _Request) -> bool:
        """Start one request on the runner if a slot is idle, never waiting; False (nothing done) when none is.
        The lock is held: whoever frees a slot next finds the request queued, or this has found the slot."""
        batch = _Batch([request])
        try:
            if not self._runner.try_submit(request.inputs, batch):
                return False
        except Exception as error:  # as in `_run`: inputs the backend refuses come back through _finished
            self._finished(batch, None, error)
        return True

    def _start_queued(self) -> None:
        """A runner slot came free (on the runner's thread): start queued requests while slots last. Requests
        past their deadline are answered as timed out and never run."""
        with self._wake:
            while self._pending and not self._closed:
                request = self._pending[0]
                now = time.monotonic()
                if now <= request.deadline and not self._start(request):
                    return
                self._pending.popleft()
                self._samples -= request.size
                if now > request.deadline:
                    self.metrics.timed_out()
                    request.done(None, RequestTimedOut(self.name, (now - request.queued_at) * 1000))
                else:
                    self.metrics.queued((now - request.queued_at) * 1000)

    def _give_back(self) -> None:
        with self._wake:
            self._reserved -= 1

    def _check_room(self) -> None:
        waiting = len(self._pending) + self._reserved
        if waiting >= self.batching.max_queue_size:
            self.metrics.rejected()
            raise QueueFull(self.name, waiting)

    def close(self) -> None:
        """Answer what is still queued as refused, finish what is in flight, stop the batching thread if any."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()  # it answers what is left, once the last batch it formed is submitted
        else:
            self._refuse_leftover()
        self._runner.close()

    # -- the batching thread --------------------------------------------------------------------------

    def _form_batches(self) -> None:
        while (batch := self._next_batch()) is not None:
            if batch:
                self._run(batch)
        self._refuse_leftover()

    def _refuse_leftover(self) -> None:
        with self._wake:
            leftover, self._pending = list(self._pending), deque()
        for request in leftover:
            request.done(None, RuntimeError(f"model {self.name} stopped being served"))

    def _next_batch(self) -> list[_Request] | None:
        """The requests that leave together, once the rule says so; None when closed."""
        limit = max(1, self.batching.max_batch_size)
        delay = self.batching.max_queue_delay_ms / 1000 if self.batching.max_batch_size > 1 else 0.0
        with self._wake:
            while not self._closed:
                if not self._pending:
                    self._wake.wait()
                    continue
                wait = self._pending[0].queued_at + delay - time.monotonic()
                if self._samples >= limit or wait <= 0:
                    return self._take(limit)
                self._wake.wait(wait)
            return None

    def _take(self, limit: int) -> list[_Request]:
        """Whole requests from the front, up to `limit` samples; requests past their deadline are answered."""
        batch: list[_Request] = []
        taken = 0
        now = time.monotonic()
        while self._pending and (not batch or taken + self._pending[0].size <= limit):
            request = self._pending.popleft()
            self._samples -= request.size
            if now > request.deadline:
                self.metrics.timed_out()
                request.done(None, RequestTimedOut(self.name, (now - request.queued_at) * 1000))
                continue
            batch.append(request)
            taken += request.size
        return batch

    def _run(self, requests: list[_Request]) -> None:
        started = time.monotonic()
        for request in requests:
            self.metrics.queued((started - request.queued_at) * 1000)
        if len(requests) == 1:
            inputs = requests[0].inputs
        else:
            inputs = [np.concatenate(parts) for parts in zip(*(r.inputs for r in requests), strict=True)]
        try:
            self._runner.submit(inputs, _Batch(requests))
        except Exception as error:  # inputs the backend refuses are answered through _finished; this is the rest
            self._finished(_Batch(requests), None, error)

    def _finished(self, batch: _Batch, outputs: Outputs | None, error: BaseException | None) -> None:
        compute_ms = (time.perf_counter() - batch.started) * 1000
        samples = sum(r.size for r in batch.requests)
        self.metrics.executed(samples, compute_ms, error is None)
        if error is not None or outputs is None:
            for request in batch.requests:
                request.done(None, error or RuntimeError("the backend returned no outputs"))
            return
        if len(batch.requests) == 1:
            batch.requests[0].done(outputs, None)
            return
        offset = 0
        for request in batch.requests:
            request.done([array[offset : offset + request.size] for array in outputs], None)
            offset += request.size


def _settle(future: asyncio.Future[Outputs], outputs: Outputs | None, error: BaseException | None) -> None:
    if future.done():  # the client went away and the awaiting task was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        assert outputs is not None
        future.set_result(outputs)
