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
import base64
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from edge_runtime import __version__
from edge_runtime.serving.batching import QueueFull, RequestTimedOut
from edge_runtime.serving.openapi import openapi_document
from edge_runtime.serving.protocol import (
    HEADER_LENGTH,
    InferRequest,
    ProtocolError,
    encode_response,
    parse_request,
    tensor_metadata,
)
from edge_runtime.serving.served import ServedModel

__all__ = ["HttpLimits", "build_app"]

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]
IMAGE_TYPES = ("image/jpeg", "image/png", "image/jpg")
OPEN_PATHS = ("/v2/health/live", "/v2/health/ready")


class HttpLimits:
    def __init__(self, max_body_bytes: int = 16 << 20, read_timeout_s: float = 10.0) -> None:
        self.max_body_bytes = max_body_bytes
        self.read_timeout_s = read_timeout_s


class _Refused(Exception):  # noqa: N818 - an answer, not a fault
    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


def build_app(models: Mapping[str, ServedModel], token: str | None, limits: HttpLimits) -> Starlette:
    """The application serving `models`; with `token`, every route but health needs `Authorization: Bearer`."""

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
                    "variant": model.model.variant_id,
                    "max_batch_size": model.max_batch_size,
                    "batching": "joined into batches" if model.max_batch_size > 0 else "concurrent requests",
                },
            }
        )

    async def model_ready(request: Request) -> Response:
        served(request)
        return JSONResponse({"name": request.path_params["name"], "ready": True})

    async def infer(request: Request) -> Response:
        model = served(request)
        body = await _read_body(request, limits)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        try:
            if content_type in IMAGE_TYPES:
                return await _infer_image(model, body)
            header_length = _header_length(request)
            image = _bytes_input(body, header_length)
            if image is not None:
                return await _infer_image(model, image)
            return await _infer_tensors(model, body, header_length)
        except ProtocolError as error:
            model.metrics.request(ok=False)
            raise _Refused(error.status, error.message) from None

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


async def _infer_tensors(model: ServedModel, body: bytes, header_length: int | None) -> Response:
    request = parse_request(body, header_length, model.model.inputs, model.max_batch_size)
    output_names = [t.name for t in model.model.outputs]
    unknown = [name for name in request.outputs or () if name not in output_names]
    if unknown:
        raise ProtocolError(f"unknown output {unknown[0]!r}; the model gives {', '.join(output_names)}")
    inputs = [request.inputs[t.name] for t in model.model.inputs]
    outputs = await _through_queue(model, inputs, request)
    payload, headers = encode_response(
        model.name, model.version, request, dict(zip(output_names, outputs, strict=True))
    )
    model.metrics.request(ok=True)
    return Response(payload, headers=headers)


async def _infer_image(model: ServedModel, image: bytes) -> Response:
    started = time.perf_counter()
    tensor, transform = model.image_tensor(image)
    pre_ms = (time.perf_counter() - started) * 1000
    outputs = await _through_queue(model, [tensor], None)
    message = model.describe(outputs, transform, started, pre_ms)
    model.metrics.request(ok=True)
    return Response(json.dumps(message, separators=(",", ":")).encode(), media_type="application/json")


async def _through_queue(model: ServedModel, inputs: list[Any], request: InferRequest | None) -> list[Any]:
    timeout = request.parameters.get("timeout") if request is not None else None
    timeout_ms = float(timeout) / 1000 if isinstance(timeout, (int, float)) and timeout > 0 else None  # microseconds
    try:
        return await model.queue.infer(inputs, timeout_ms)
    except QueueFull as full:
        model.metrics.request(ok=False)
        raise _Refused(503, str(full), {"Retry-After": "1"}) from None
    except RequestTimedOut as late:
        model.metrics.request(ok=False)
        raise _Refused(504, str(late)) from None
    except Exception as error:
        model.metrics.request(ok=False)
        log.warning("model %s: inference failed: %s", model.name, error)
        raise _Refused(500, f"model {model.name}: inference failed: {error}") from None


async def _read_body(request: Request, limits: HttpLimits) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise _Refused(413, f"the body has {declared} bytes; this server takes at most {limits.max_body_bytes}")
    chunks: list[bytes] = []
    size = 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise _Refused(413, f"the body is over {limits.max_body_bytes} bytes, the most this server takes")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(collect(), limits.read_timeout_s)
    except asyncio.TimeoutError:
        raise _Refused(408, f"the body did not arrive within {limits.read_timeout_s:g} s") from None
    return b"".join(chunks)


def _header_length(request: Request) -> int | None:
    value = request.headers.get(HEADER_LENGTH.lower())
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ProtocolError(f"{HEADER_LENGTH} must be a whole number, got {value!r}") from None


def _bytes_input(body: bytes, header_length: int | None) -> bytes | None:
    """The image in a request whose only input is a BYTES tensor of one element; None for other requests."""
    header = body if header_length is None else body[:header_length]
    try:
        document = json.loads(header)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None  # parse_request says what is wrong with it
    inputs = document.get("inputs") if isinstance(document, dict) else None
    if not (isinstance(inputs, list) and len(inputs) == 1 and isinstance(inputs[0], dict)):
        return None
    tensor = inputs[0]
    if tensor.get("datatype") != "BYTES":
        return None
    if tensor.get("shape") not in ([1], [1, 1]):
        raise ProtocolError("a BYTES input holds one image: its shape must be [1]")
    size = (tensor.get("parameters") or {}).get("binary_data_size")
    if header_length is not None and isinstance(size, int):
        element = body[header_length:]
        if size != len(element) or len(element) < 4:
            raise ProtocolError(f"the BYTES input declares {size} bytes, the body has {len(element)}")
        length = int.from_bytes(element[:4], "little")
        if length != len(element) - 4:
            raise ProtocolError(f"the BYTES element says {length} bytes, {len(element) - 4} follow")
        return element[4:]
    data = tensor.get("data")
    value = data[0] if isinstance(data, list) and len(data) == 1 else None
    if not isinstance(value, str):
        raise ProtocolError("a BYTES input in JSON holds its image as one base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise ProtocolError("the BYTES input is not valid base64") from None


def _check_token(request: Request, token: str) -> None:
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise _Refused(401, "a valid bearer token is required", {"WWW-Authenticate": "Bearer"})
