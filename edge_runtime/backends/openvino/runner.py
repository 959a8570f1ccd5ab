"""OpenVINO's asynchronous runner: several infer requests in flight, results handed on in order.

Kept apart from the backend module because how results come back is a threading matter of its own:
no Python code may run on OpenVINO's threads (see `OpenVinoAsyncRunner`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from edge_runtime.backends.base import AsyncRunner, Callback, Outputs, idle_hook
from edge_runtime.backends.openvino.devices import first_line
from edge_runtime.errors import ModelMismatchError


def shareable(array: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """The caller's array itself when OpenVINO can read it in place, else a converted contiguous copy."""
    flags = array.flags if isinstance(array, np.ndarray) else None
    if flags is not None and array.dtype == dtype and flags.c_contiguous and flags.writeable and flags.aligned:
        return array
    return np.array(array, dtype=dtype, order="C")


class OpenVinoAsyncRunner(AsyncRunner):
    """Keeps up to `jobs` OpenVINO infer requests busy; results come back in submission order.

    No Python callback runs on OpenVINO's threads: a callback would need the GIL there, and while another
    thread held it the stream that finished could not take its next request (small models at high rates
    lost 10-15% of their throughput that way). Instead one completion thread waits on the requests in
    the order they were started (`wait` releases the GIL), copies the outputs out, returns the request
    to the pool and then calls `callback`. A callback that blocks holds back the results behind it, and
    once those requests are done `submit` waits too: the backpressure reaches the caller.

    Inputs the model refuses are reported through `callback` at once, on the submitting thread, ahead
    of results still in flight. Inputs are read in place: the runner keeps them referenced until their
    request has finished. An exception raised by the callback is re-raised by the next `submit` or
    `wait_all`; `submit` after `close` raises RuntimeError.
    """

    def __init__(self, compiled: Any, jobs: int, callback: Callback) -> None:
        from openvino import Tensor

        self.capacity = jobs
        self._tensor_type = Tensor  # wrapping the arrays ourselves skips the binding's per-call type dispatch
        self._input_dtypes = [np.dtype(port.get_element_type().to_dtype()) for port in compiled.inputs]
        self._output_count = len(compiled.outputs)
        self._callback = callback
        self._idle_requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for _ in range(jobs):
            self._idle_requests.put(compiled.create_infer_request())
        self._started: queue.SimpleQueue[tuple[Any, Any, list[np.ndarray]] | None] = queue.SimpleQueue()
        self._start_lock = threading.Lock()  # started order is completion order, also with several submitters
        self._outstanding = 0
        self._closed = False
        self._settled = threading.Condition()
        self._callback_errors: list[BaseException] = []
        self._completer = threading.Thread(target=self._complete, name="openvino-done", daemon=True)
        self._completer.start()

    def submit(self, inputs: Sequence[np.ndarray], userdata: Any = None) -> None:
        self._raise_callback_error()
        self._start(self._idle_requests.get(), inputs, userdata)  # get blocks while every request is busy

    def try_submit(self, inputs: Sequence[np.ndarray], userdata: Any = None) -> bool:
        self._raise_callback_error()
        try:
            request = self._idle_requests.get_nowait()
        except queue.Empty:
            return False
        self._start(request, inputs, userdata)
        return True

    def _start(self, request: Any, inputs: Sequence[np.ndarray], userdata: Any) -> None:
        """Start `inputs` on `request`, an idle infer request taken from the pool."""
        with self._settled:
            if self._closed:
                self._idle_requests.put(request)
                raise RuntimeError("the OpenVINO runner is closed")
            self._outstanding += 1
        try:
            arrays = [shareable(array, dtype) for array, dtype in zip(inputs, self._input_dtypes, strict=True)]
            with self._start_lock:
                for index, array in enumerate(arrays):
                    request.set_input_tensor(index, self._tensor_type(array, shared_memory=True))
                request.start_async()
                self._started.put((request, userdata, arrays))
        except (RuntimeError, TypeError, ValueError) as error:
            self._idle_requests.put(request)
            self._finish(userdata, None, ModelMismatchError(f"OpenVINO refused the inputs: {first_line(error)}"))
        except BaseException:  # not about the inputs (interrupted, out of memory): give the slot back, re-raise
            self._idle_requests.put(request)
            self._settle()
            raise

    def wait_all(self) -> None:
        with self._settled:
            self._settled.wait_for(lambda: self._outstanding == 0)
        self._raise_callback_error()

    def close(self) -> None:
        with self._settled:
            self._closed = True
        try:
            self.wait_all()
        finally:
            self._started.put(None)
            self._completer.join()

    def _complete(self) -> None:
        while (started := self._started.get()) is not None:
            request, userdata, _inputs_kept_alive_until_now = started
            try:
                request.wait()
                outputs: Outputs | None = [request.get_output_tensor(i).data.copy() for i in range(self._output_count)]
                error: BaseException | None = None
            except Exception as failure:  # the plugin failed this request; the next ones may still run
                outputs, error = None, failure
            self._idle_requests.put(request)
            idle_hook(self.on_idle)  # before the callback: whoever waits for a request may start it at once
            self._finish(userdata, outputs, error)

    def _finish(self, userdata: Any, outputs: Outputs | None, error: BaseException | None) -> None:
        try:
            self._callback(userdata, outputs, error)
        except BaseException as callback_error:
            self._callback_errors.append(callback_error)
        finally:
            self._settle()

    def _settle(self) -> None:
        with self._settled:
            self._outstanding -= 1
            self._settled.notify_all()

    def _raise_callback_error(self) -> None:
        if self._callback_errors:
            error = self._callback_errors.pop(0)
            self._callback_errors.clear()
            raise error
