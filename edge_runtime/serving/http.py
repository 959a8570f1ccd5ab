"""The HTTP endpoint: the Open Inference Protocol's routes (KServe v2, as Triton serves them) on Starlette.

    GET  /v2                                      server metadata
    GET  /v2/health/live, /v2/health/ready        liveness, readiness (no token needed)
    GET  /v2/models/{name}[/versions/{v}]         model metadata: inputs, outputs, datatypes, shapes
    GET  /v2/models/{name}[/versions/{v}]/ready   200 when the model is served
    POST /v2/models/{name}[/versions/{v}]/infer   tensors (JSON or binary data), or an image (JPEG/PNG
                                                  body, or a BYTES tensor holding one) answered with the
                                                  result message the result topic would carry
    GET  /v2/openapi.json                         this API as an OpenAPI document

Everything arriving is hostile until checked: a body over the limit is refused before it is read to
the end (413), a body that takes longer than the read timeout to arrive is dropped (408), and a token,
where one is configured, is compared in constant time. Errors are JSON objects `{"error": "..."}` with
the status that says whose fault it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from typing import Any

import anyio
import numpy as np
from anyio import to_thread
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from edge_runtime import __version__
from edge_runtime.pipeline.results import model_record
from edge_runtime.serving.batching import Place, QueueFull
from edge_runtime.serving.metrics import UnknownModelRequests
from edge_runtime.serving.openapi import openapi_document
from edge_runtime.serving.protocol import (
    HEADER_LENGTH,
    ProtocolError,
    tensor_metadata,
)
from edge_runtime.serving.served import ServedModel, refusal

__all__ = ["HttpLimits", "build_app"]

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]
OPEN_PATHS = ("/v2/health/live", "/v2/health/ready")
ALIGNMENT = 64


class HttpLimits:
    def __init__(
        self, max_body_bytes: int = 16 << 20, read_timeout_s: float = 10.0, max_bytes_in_flight: int = 128 << 20
    ) -> None:
        self.max_body_bytes = max_body_bytes
        self.read_timeout_s = read_timeout_s
        self.max_bytes_in_flight = max_bytes_in_flight


class _BytesInFlight:
    """The request bodies the server holds at once, counted from their headers to their answers: a request
    whose body would take the count over the cap is refused before a byte of it is read. A body without a
    Content-Length (chunked) counts as the largest body allowed, since its size is known only at its end."""

    def __init__(self, limits: HttpLimits) -> None:
        self._limits = limits
        self.held = 0  # the event loop's only: no lock

    @contextlib.contextmanager
    def hold(self, size: int | None) -> Iterator[None]:
        amount = self._limits.max_body_bytes if size is None else size
        if self.held + amount > self._limits.max_bytes_in_flight:
            raise _Refused(
                503,
                f"the server holds {self.held} bytes of request bodies, and this one would take it past "
                f"{self._limits.max_bytes_in_flight} (max_bytes_in_flight); try again shortly",
                {"Retry-After": "1"},
            )
        self.held += amount
        try:
            yield
        finally:
            self.held -= amount


class _Refused(Exception):  # noqa: N818 - an answer, not a fault
    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


def build_app(
    models: Mapping[str, ServedModel],
    token: str | None,
    limits: HttpLimits,
    unknown: UnknownModelRequests | None = None,
) -> Starlette:
    """The application serving `models`; with `token`, every route but health needs `Authorization: Bearer`.

    What a burst can cost is bounded: `max_bytes_in_flight` of bodies, each model's `max_queue_size` requests,
    and one decoded image per core (images and JSON bodies are prepared on at most that many threads)."""
    in_flight = _BytesInFlight(limits)
    preparing = anyio.CapacityLimiter(os.cpu_count() or 1)

    def guarded(handler: Handler) -> Handler:
        async def guard(request: Request) -> Response:
            try:
                if token is not None and request.url.path not in OPEN_PATHS:
                    _check_token(request, token)
                return await handler(request)
            except _Refused as refused:
                return JSONResponse({"error": refused.message}, refused.status, headers=refused.headers)

        return guard

    def served(request: Request) -> ServedModel:
        name = request.path_params["name"]
        model = models.get(name)
        if model is None:
            if unknown is not None:
                unknown.add(name, "HTTP")
            raise _Refused(404, f"unknown model {name!r}; served: {', '.join(models) or 'none'}")
        version = request.path_params.get("version")
        if version is not None and version != model.version:
            raise _Refused(404, f"model {name!r} has no version {version!r}; it serves version {model.version}")
        return model

    async def server_metadata(request: Request) -> Response:
        return JSONResponse({"name": "edge-runtime", "version": __version__, "extensions": ["binary_tensor_data"]})

    async def live(request: Request) -> Response:
        return JSONResponse({"live": True})

    async def ready(request: Request) -> Response:
        return JSONResponse({"ready": True})

    async def model_metadata(request: Request) -> Response:
        model = served(request)
        runs_on = model.model.backend.runs_on
        return JSONResponse(
            {
                "name": model.name,
                "versions": [model.version],
                "platform": f"edge_runtime_{runs_on.backend}",
                "inputs": [tensor_metadata(t, model.max_batch_size) for t in model.model.inputs],
                "outputs": [tensor_metadata(t, model.max_batch_size) for t in model.model.outputs],
                "parameters": {
                    "device": runs_on.device,
                    "precision": runs_on.precision,
                    **({"hint": runs_on.details["hint"]} if runs_on.details.get("hint") else {}),
                    "variant": model.model.variant_id,
                    "sha256": model_record(model.model)["sha256"],  # as a pipeline's model topic has it
                    "max_batch_size": model.max_batch_size,
                    "batching": "joined into batches" if model.max_batch_size > 0 else "concurrent requests",
                    "batching_reason": model.batching.reason,
                },
            }
        )

    async def model_ready(request: Request) -> Response:
        served(request)
        return JSONResponse({"name": request.path_params["name"], "ready": True})

    async def infer(request: Request) -> Response:
        """Admission is decided from the headers alone (the body's size against the bytes held, a place in the
        model's queue); only then is the body read and prepared."""
        model = served(request)
        try:
            header_length = _header_length(request)
        except ProtocolError as error:
            raise _Refused(error.status, error.message) from None
        size = _declared_size(request, limits)
        with in_flight.hold(size), _place_in(model) as place:
            body = await _read_body(request, limits, size, header_length or 0)
            content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
            try:
                if header_length is None:  # an image to decode, or tensors in JSON to parse: off the event loop
                    prepared = await to_thread.run_sync(
                        model.prepare, body, content_type, header_length, limiter=preparing
                    )
                else:  # binary tensors are read in place, at once
                    prepared = model.prepare(body, content_type, header_length)
                outputs = await model.queue.infer(prepared.inputs, prepared.timeout_ms, place=place)
                payload, headers = model.respond(prepared, outputs)
            except Exception as error:
                model.metrics.request(ok=False)
                status, message = refusal(model.name, error)
                raise _Refused(status, message, {"Retry-After": "1"} if status == 503 else None) from None
        model.metrics.request(ok=True)
        return Response(payload, headers=headers)

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document(list(models)))

    routes = [
        Route("/v2", guarded(server_metadata)),
        Route("/v2/health/live", guarded(live)),
        Route("/v2/health/ready", guarded(ready)),
        Route("/v2/openapi.json", guarded(openapi)),
        Route("/v2/models/{name}", guarded(model_metadata)),
        Route("/v2/models/{name}/versions/{version}", guarded(model_metadata)),
        Route("/v2/models/{name}/ready", guarded(model_ready)),
        Route("/v2/models/{name}/versions/{version}/ready", guarded(model_ready)),
        Route("/v2/models/{name}/infer", guarded(infer), methods=["POST"]),
        Route("/v2/models/{name}/versions/{version}/infer", guarded(infer), methods=["POST"]),
    ]
    return Starlette(routes=routes)


def _place_in(model: ServedModel) -> Place:
    """A place in the model's queue for a request still to be read, or 503 at once."""
    try:
        return model.queue.reserve()
    except QueueFull as full:
        model.metrics.request(ok=False)
        raise _Refused(503, str(full), {"Retry-After": "1"}) from None
    except RuntimeError as closed:  # a release took the model's place just now: the next request finds the new one
        raise _Refused(503, f"{closed}; try again", {"Retry-After": "1"}) from None


def _declared_size(request: Request, limits: HttpLimits) -> int | None:
    """The body's Content-Length (None when chunked); 413 at once when it is over the limit."""
    declared = request.headers.get("content-length")
    size = int(declared) if declared is not None and declared.isdigit() else None
    if size is not None and size > limits.max_body_bytes:
        raise _Refused(413, f"the body has {declared} bytes; this server takes at most {limits.max_body_bytes}")
    return size


async def _read_body(request: Request, limits: HttpLimits, size: int | None, binary_at: int) -> memoryview:
    """The whole body in one writable buffer, its byte `binary_at` (where binary tensors start, after the
    JSON header) on a 64-byte boundary, so that a backend reads the tensors in place (see `ServedModel`)."""
    # A chunked body's size is known only at its end: it grows instead, unaligned.
    body = bytearray() if size is None else _aligned_buffer(size, min(binary_at, size))
    filled = 0

    async def collect() -> None:
        nonlocal filled
        async for chunk in request.stream():
            end = filled + len(chunk)
            if end > limits.max_body_bytes:
                raise _Refused(413, f"the body is over {limits.max_body_bytes} bytes, the most this server takes")
            if isinstance(body, bytearray):
                body.extend(chunk)
            elif end > len(body):  # the HTTP parser holds a body to its Content-Length; this is a guard
                raise _Refused(400, f"the body is longer than its Content-Length of {size} bytes")
            else:
                body[filled:end] = chunk
            filled = end

    try:
        await _within(collect(), limits.read_timeout_s)
    except asyncio.TimeoutError:
        raise _Refused(408, f"the body did not arrive within {limits.read_timeout_s:g} s") from None
    except ClientDisconnect:  # nobody is left to answer; the answer is dropped with the connection
        log.debug("a client hung up after %d bytes of its body", filled)
        raise _Refused(400, f"the client hung up after {filled} bytes of its body") from None
    return memoryview(body)[:filled]


async def _within(work: Coroutine[Any, Any, None], seconds: float) -> None:
    """`work`, or TimeoutError once `seconds` pass. On Python 3.11+ in the request's own task: `wait_for` runs it
    as a task of its own, which costs every request a task and a turn of the event loop more."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            await work
    else:
        await asyncio.wait_for(work, seconds)


def _aligned_buffer(size: int, aligned_at: int) -> memoryview:
    """`size` writable bytes whose byte `aligned_at` starts a 64-byte line (a cache line, and the widest
    SIMD load), the alignment a backend needs to read an array in place rather than copy it."""
    storage = np.empty(size + ALIGNMENT, np.uint8)
    start = -(storage.ctypes.data + aligned_at) % ALIGNMENT
    return storage[start : start + size].data


def _header_length(request: Request) -> int | None:
    value = request.headers.get(HEADER_LENGTH.lower())
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ProtocolError(f"{HEADER_LENGTH} must be a whole number, got {value!r}") from None


def _check_token(request: Request, token: str) -> None:
    """An empty bearer value is refused whatever the token: the config refuses an empty token, but one that
    slipped through (a program building the settings) must not make `Authorization: Bearer` a key."""
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value or not hmac.compare_digest(value.encode(), token.encode()):
        raise _Refused(401, "a valid bearer token is required", {"WWW-Authenticate": "Bearer"})
