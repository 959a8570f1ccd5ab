"""Counters of a served model, in the spirit of Triton's: what came in, what ran, and how long it waited.

`inference_count` counts samples and `execution_count` the batches they ran in, so their ratio is the
mean batch size; the batch-size histogram shows how often each size left the queue, and `direct_count`
how many requests never waited in it (started by their caller's thread on an idle runner slot). Times are
milliseconds per stage of a request's path, summed: prepare (request to input tensors), queue,
compute (per execution) and respond (outputs to the answer), from which a reader takes means. The
daemon puts `snapshot()` into its stats report, which the stats topic and the Prometheus endpoint
both read.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

from edge_runtime.sources.logs import ThrottledLog

__all__ = ["ModelMetrics", "UnknownModelRequests"]

log = logging.getLogger(__name__)


class UnknownModelRequests:
    """Requests for a model this box does not serve, over HTTP and MQTT together: a client with a stale
    model name, or someone probing. Counted for the stats, logged at most once a minute with the name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self._log = ThrottledLog(log, interval_s=60.0)

    def add(self, name: str, via: str) -> None:
        with self._lock:
            self.count += 1
        self._log.log("%s request for unknown model %r answered 404", via, name[:80])


class ModelMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.request_success = 0
        self.request_failure = 0
        self.rejected_full = 0
        self.timed_out_in_queue = 0
        self.direct_count = 0
        self.inference_count = 0
        self.execution_count = 0
        self.execution_failure = 0
        self.prepare_ms = 0.0
        self.queue_ms = 0.0
        self.compute_ms = 0.0
        self.respond_ms = 0.0
        self.batch_sizes: Counter[int] = Counter()

    def request(self, ok: bool) -> None:
        """One request answered: with its outputs, or with an error of any kind."""
        with self._lock:
            if ok:
                self.request_success += 1
            else:
                self.request_failure += 1

    def rejected(self) -> None:
        with self._lock:
            self.rejected_full += 1

    def timed_out(self) -> None:
        with self._lock:
            self.timed_out_in_queue += 1

    def prepared(self, took_ms: float) -> None:
        with self._lock:
            self.prepare_ms += took_ms

    def responded(self, took_ms: float) -> None:
        with self._lock:
            self.respond_ms += took_ms

    def started_directly(self) -> None:
        """One request started on the backend by its caller's thread, past the queue (see `InferenceQueue`)."""
        with self._lock:
            self.direct_count += 1

    def queued(self, waited_ms: float) -> None:
        with self._lock:
            self.queue_ms += waited_ms

    def executed(self, samples: int, compute_ms: float, ok: bool) -> None:
        with self._lock:
            self.execution_count += 1
            self.compute_ms += compute_ms
            if ok:
                self.inference_count += samples
                self.batch_sizes[samples] += 1
            else:
                self.execution_failure += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "request_success": self.request_success,
                "request_failure": self.request_failure,
                "rejected_queue_full": self.rejected_full,
                "timed_out_in_queue": self.timed_out_in_queue,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "direct_count": self.direct_count,
                "execution_failure": self.execution_failure,
                "prepare_ms_total": round(self.prepare_ms, 3),
                "queue_ms_total": round(self.queue_ms, 3),
                "compute_ms_total": round(self.compute_ms, 3),
                "respond_ms_total": round(self.respond_ms, 3),
                "batch_sizes": {str(size): count for size, count in sorted(self.batch_sizes.items())},
            }
