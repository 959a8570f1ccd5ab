"""One pipeline: source → preprocess → infer → postprocess → publish, with the stages overlapping.

Three threads of work meet here. The feed thread pulls items from the source, preprocesses them and
submits them to the backend's async runner, which blocks while the runner is full: that is the
backpressure that makes a live camera drop stale frames at the source instead of queueing them.
The runner hands each finished request's outputs to a bounded post queue, from a thread of its own
(OpenVINO's completion thread, LiteRT's and ONNX Runtime's worker threads). The post
thread decodes the result, follows its objects where the pipeline tracks them (see `objects`), runs
second models on the crops of its detections where the pipeline has a cascade (see `cascade`), keeps
what `publish` asks for and describes it, then gives it to each of the pipeline's outputs (see
`outputs`): the result message to the publisher, which spools it to disk before anything can be lost,
a snapshot, a mask. A tracking pipeline's post thread also wakes when nothing came to post for
`IDLE_POLL_S`, so that its objects age while the motion gate holds every frame back.

The model a pipeline runs is put on its retained model topic when it starts and after every swap, through
`retained` (the daemon's `RetainedStates`), so the digests of its files reach a subscriber once rather than
in every result.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from edge_runtime.backends.base import AsyncRunner, Outputs
from edge_runtime.decoders.base import Decoder
from edge_runtime.decoders.decoded import Decoded, Detections
from edge_runtime.mqtt.topics import Topics
from edge_runtime.package.manifest import InputSpec
from edge_runtime.pipeline.cascade import Cascade
from edge_runtime.pipeline.objects import ObjectListener, ZonesOf, object_stage_for
from edge_runtime.pipeline.outputs import Described, MessageSink, Output, PublishPolicy, publish_outputs
from edge_runtime.pipeline.preprocess import FrameTransform, Preprocessor, preprocessor_for
from edge_runtime.pipeline.results import (
    FrameSize,
    ModelInfo,
    RuntimeInfo,
    StageLatency,
    build_result,
    encode,
    model_info,
    model_record,
    runtime_info,
)
from edge_runtime.placement.model import LoadedModel
from edge_runtime.service.stats import PipelineStats
from edge_runtime.sources.base import EndOfSource, Frame, Item, Source
from edge_runtime.tracking.config import TrackConfig

log = logging.getLogger(__name__)

__all__ = ["IDLE_POLL_S", "Pipeline", "PublishPolicy", "RetainedSink"]

IDLE_POLL_S = 0.25  # how long a tracking pipeline's post thread waits for a result before it tells its objects


class RetainedSink(Protocol):
    """Where a pipeline puts a state whose latest value alone counts, retained: `RetainedStates` in the daemon."""

    def put(self, topic: str, payload: bytes) -> None: ...


@dataclass(frozen=True)
class _ModelInUse:
    """What turns a model's outputs into a result: kept with each job, so a job in flight when the model is
    swapped is still decoded and described by the model that ran it."""

    model: LoadedModel
    decoder: Decoder
    model_info: ModelInfo
    runtime: RuntimeInfo
    task: str

    @classmethod
    def of(cls, model: LoadedModel, decoder: Decoder) -> _ModelInUse:
        return cls(model, decoder, model_info(model), runtime_info(model), model.package.manifest.task.value)


@dataclass
class _Swap:
    model: LoadedModel
    decoder: Decoder
    input_spec: InputSpec
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


@dataclass
class _Job:
    item: Item
    transform: FrameTransform | None  # None for sensor windows, which have no pixels to map back to
    submitted: float  # perf_counter
    pre_ms: float
    used: _ModelInUse


class Pipeline:
    """One source's items through one model; results go to the outputs `publish_outputs` makes of the policy,
    plus any `extra_outputs`. With `track`, detections are followed as objects first, and each update goes to
    `object_listeners` too; with `zones_of`, each object's detection also names the zones it is in."""

    def __init__(
        self,
        *,
        name: str,
        topics: Topics,
        source: Source,
        model: LoadedModel,
        decoder: Decoder,
        input_spec: InputSpec,
        policy: PublishPolicy,
        sink: MessageSink,
        extra_outputs: Sequence[Output] = (),
        track: TrackConfig | None = None,
        object_listeners: Sequence[ObjectListener] = (),
        zones_of: ZonesOf | None = None,
        cascade: Cascade | None = None,
        retained: RetainedSink | None = None,
        max_in_flight: int | None = None,
        on_progress: Callable[[str], None] | None = None,
        on_waiting: Callable[[str, str], None] | None = None,
    ) -> None:
        self.name = name
        self.device_id = topics.device_id
        self.source = source
        self.model = model
        self.decoder = decoder
        self.policy = policy
        self.outputs = [*publish_outputs(policy, topics, name, sink), *extra_outputs]
        self._retained = retained
        self._model_topic = topics.model(name)
        self.stats = PipelineStats(name)
        self.objects = object_stage_for(track, object_listeners, self.stats.error, zones_of, cascade)
        self.cascade = cascade  # with tracking, run by the objects stage; without, here after decoding
        if cascade is not None:
            cascade.report_to(self.stats.cascade_crops)
        self._items_read = 0  # by the feed thread, and taken off the post queue by the post thread: equal when
        self._items_posted = 0  # nothing is in flight, the only time the objects may be told that time went by
        self.finished = threading.Event()
        self._on_progress = on_progress or (lambda _name: None)
        self._on_waiting = on_waiting or (lambda _name, _reason: None)
        self._max_in_flight = max_in_flight
        self._preprocess: Preprocessor = preprocessor_for(input_spec, model.inputs[0])
        self._in_use = _ModelInUse.of(model, decoder)
        self._swap: _Swap | None = None
        self._swap_lock = threading.Lock()
        self._taps: tuple[Callable[[Item], None], ...] = ()
        self.last_described: Described | None = None  # the latest result handed out, for a snapshot on request
        self._post_queue: queue.Queue[tuple[_Job, Outputs | None, BaseException | None] | None] = queue.Queue(64)
        self._stop = threading.Event()
        self._last_signature: object = None
        self._runner: AsyncRunner | None = None
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._runner = self.model.backend.async_runner(self._on_inferred, self._max_in_flight)
        self._announce_model()
        if self.objects is not None:
            self.objects.start()
        self.source.start()
        self._threads = [
            threading.Thread(target=self._feed, name=f"feed-{self.name}", daemon=True),
            threading.Thread(target=self._post, name=f"post-{self.name}", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking input, finish what is in flight, and hand every result to the sink."""
        self._stop.set()
        self.source.close()
        self._threads[0].join(timeout)
        if self._runner is not None:
            self._runner.close()
        self._post_queue.put(None)
        self._threads[1].join(timeout)
        if self.cascade is not None:
            self.cascade.close()

    def add_tap(self, tap: Callable[[Item], None]) -> None:
        """Also hand each item read to `tap`, on the feed thread: it must return at once (a shadow model's queue)."""
        with self._swap_lock:
            self._taps = (*self._taps, tap)

    def remove_tap(self, tap: Callable[[Item], None]) -> None:
        with self._swap_lock:
            self._taps = tuple(t for t in self._taps if t is not tap)

    def swap_model(self, model: LoadedModel, decoder: Decoder, input_spec: InputSpec, timeout: float = 30.0) -> None:
        """Run every item read from now on through `model`, between two items: none is lost or run twice.

        The feed thread takes the swap before it reads the next item: it waits for the requests in
        flight (their results are still decoded and described by the model that ran them), then opens
        the new model's runner. The caller releases the old model once this returns. Raises what the
        new model's runner raised, with the old model still running.
        """
        swap = _Swap(model, decoder, input_spec)
        with self._swap_lock:
            feeding = self._threads and self._threads[0].is_alive()
            if feeding:
                self._swap = swap
        if not feeding:
            self._take_swap(swap)
        elif not swap.done.wait(timeout):
            with self._swap_lock:
                if self._swap is swap:
                    self._swap = None
                    raise TimeoutError(f"pipeline {self.name}: the model was not swapped within {timeout:.0f} s")
            swap.done.wait()
        if swap.error is not None:
            raise swap.error

    def _take_swap(self, swap: _Swap) -> None:
        try:
            preprocess = preprocessor_for(swap.input_spec, swap.model.inputs[0])
            runner = swap.model.backend.async_runner(self._on_inferred, self._max_in_flight)
        except BaseException as error:
            swap.error = error
            swap.done.set()
            return
        old = self._runner
        if old is not None:
            old.wait_all()
            old.close()
        self._runner, self._preprocess = runner, preprocess
        self.model, self.decoder = swap.model, swap.decoder
        self._in_use = _ModelInUse.of(swap.model, swap.decoder)
        self._last_signature = None
        self._announce_model()
        swap.done.set()

    def _announce_model(self) -> None:
        """Put the model in use on the retained model topic; a failure is logged, never undoes a start or a swap."""
        if self._retained is None:
            return
        try:
            self._retained.put(self._model_topic, encode(model_record(self.model)))
        except Exception:
            log.exception("pipeline %s: publishing the model in use failed", self.name)

    def _feed(self) -> None:
        assert self._runner is not None
        try:
            while not self._stop.is_set():
                if self._swap is not None:  # read without the lock on every item; taken under it
                    with self._swap_lock:
                        swap, self._swap = self._swap, None
                    if swap is not None:
                        self._take_swap(swap)
                try:
                    item = self.source.read(timeout=0.5)
                except EndOfSource:
                    log.info("pipeline %s: source %s finished", self.name, self.source.name)
                    break
                if item is None:
                    stats = self.source.stats
                    self._on_waiting(
                        self.name, "input" if stats.connected else f"source: {stats.last_error or 'connecting'}"
                    )
                    continue
                self._items_read += 1
                for tap in self._taps:
                    try:
                        tap(item)
                    except Exception:
                        log.exception("pipeline %s: a tap failed; the item goes on", self.name)
                started = time.perf_counter()
                data = item.image if isinstance(item, Frame) else item.samples
                tensor, transform = self._preprocess(data)
                now = time.perf_counter()
                self._runner.submit([tensor], _Job(item, transform, now, (now - started) * 1000, self._in_use))
        except Exception:
            log.exception("pipeline %s: feeding the model failed", self.name)
            self.stats.error()
        finally:
            self._runner.wait_all()
            self.finished.set()

    def _on_inferred(self, job: _Job, outputs: Outputs | None, error: BaseException | None) -> None:
        self._post_queue.put((job, outputs, error))

    def _post(self) -> None:
        idle_after = IDLE_POLL_S if self.objects is not None else None
        while True:
            try:
                entry = self._post_queue.get(timeout=idle_after)
            except queue.Empty:
                self._idle()
                continue
            if entry is None:
                if self.objects is not None:
                    self.objects.stop()  # after the last result: open events end
                break
            self._items_posted += 1
            job, outputs, error = entry
            if error is not None or outputs is None:
                log.warning("pipeline %s: inference failed: %s", self.name, error)
                self.stats.error()
                continue
            try:
                self._publish_result(job, outputs)
            except Exception:
                log.exception("pipeline %s: decoding or publishing a result failed", self.name)
                self.stats.error()
            self._on_progress(self.name)

    def _idle(self) -> None:
        """Nothing came to post for a while: with nothing in flight either, tell the objects what the source
        held back, so that objects already missing when the scene went still end on time."""
        if self.objects is None or self._items_read != self._items_posted:
            return
        try:
            self.objects.idle(self.source.latest_held())
        except Exception:
            log.exception("pipeline %s: following objects through held frames failed", self.name)
            self.stats.error()

    def _publish_result(self, job: _Job, outputs: Outputs) -> None:
        inferred = time.perf_counter()
        infer_ms = (inferred - job.submitted) * 1000
        used = job.used
        decoded = used.decoder.decode(outputs, used.model.outputs, job.transform)
        if self.objects is not None and isinstance(decoded, Detections) and isinstance(job.item, Frame):
            decoded = self.objects.on_frame(job.item, decoded)
        elif self.cascade is not None and isinstance(decoded, Detections) and isinstance(job.item, Frame):
            decoded = self.cascade.on_frame(job.item, decoded)
        published = self._published(decoded)
        result = published.to_dict() if published is not None else None
        post_ms = (time.perf_counter() - inferred) * 1000
        now = time.time()
        latency = StageLatency(job.pre_ms, infer_ms, post_ms, (now - job.item.captured_at) * 1000)
        if published is not None and result is not None:
            message = build_result(
                device_id=self.device_id,
                pipeline=self.name,
                source=self.source.name,
                kind="frame" if isinstance(job.item, Frame) else "window",
                index=job.item.index,
                frame=_frame_size(job.item),
                captured_at=job.item.captured_at,
                published_at=now,
                model=used.model_info,
                runtime=used.runtime,
                latency=latency,
                task=used.task,
                result=result,
            )
            self._hand_out(Described(job.item, published, message))
        self.stats.record(vars(latency), published is not None)

    def _hand_out(self, described: Described) -> None:
        """Each output in turn; one that fails is logged and counted, and the next still runs."""
        self.last_described = described
        for output in self.outputs:
            try:
                output(described)
            except Exception:
                log.exception("pipeline %s: output %s failed", self.name, type(output).__name__)
                self.stats.error()

    def _published(self, decoded: Decoded) -> Decoded | None:
        """The part of the result to publish, or None: what scores at least `min_score` (see
        `Decoded.scoring_at_least`), and with `only_on_change` only when that part is news. The change is
        judged on what would be published, so a weak detection flickering below the threshold is none."""
        if self.policy.min_score is not None:
            kept = decoded.scoring_at_least(self.policy.min_score)
            if kept is None:
                return None
            decoded = kept
        if self.policy.only_on_change:
            signature = decoded.signature()
            if signature == self._last_signature:
                return None
            self._last_signature = signature
        return decoded


def _frame_size(item: Item) -> FrameSize | None:
    if not isinstance(item, Frame):
        return None
    height, width = item.image.shape[:2]
    return FrameSize(int(width), int(height))
