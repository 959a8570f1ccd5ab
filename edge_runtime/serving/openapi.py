"""The served API as an OpenAPI 3 document, so clients and fuzzers (schemathesis) can read what it takes."""

from __future__ import annotations

from typing import Any

from edge_runtime import __version__
from edge_runtime.serving.protocol import DATATYPES

__all__ = ["openapi_document"]

_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
_SHAPE = {"type": "array", "items": {"type": "integer", "minimum": -1}}
_TENSOR_METADATA = {
    "type": "object",
    "required": ["name", "datatype", "shape"],
    "properties": {"name": {"type": "string"}, "datatype": {"type": "string"}, "shape": _SHAPE},
}
_REQUEST_INPUT = {
    "type": "object",
    "required": ["name", "shape", "datatype"],
    "properties": {
        "name": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {"type": "string", "enum": [*DATATYPES, "BF16"]},
        "parameters": {"type": "object"},
        "data": {},
    },
}
_RESPONSE_OUTPUT = {
    "type": "object",
    "required": ["name", "shape", "datatype"],
    "properties": {
        "name": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {"type": "string"},
        "parameters": {"type": "object"},
        "data": {"type": "array"},
    },
}
_INFER_REQUEST = {
    "type": "object",
    "required": ["inputs"],
    "properties": {
        "id": {"type": "string"},
        "parameters": {"type": "object"},
        "inputs": {"type": "array", "items": _REQUEST_INPUT},
        "outputs": {
            "type": "array",
            "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
        },
    },
}
_INFER_RESPONSE = {
    "type": "object",
    "required": ["model_name", "outputs"],
    "properties": {
        "model_name": {"type": "string"},
        "model_version": {"type": "string"},
        "id": {"type": "string"},
        "outputs": {"type": "array", "items": _RESPONSE_OUTPUT},
    },
}
_RESULT_MESSAGE = {
    "type": "object",
    "description": "for an image: the result message a pipeline publishes (edge_runtime/schemas/result.schema.json)",
    "required": ["schema_version", "id", "task", "result"],
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _errors(*statuses: int) -> dict[str, Any]:
    reasons = {
        400: "the request does not fit the model",
        401: "a bearer token is required",
        404: "no such model or version",
        408: "the body arrived too slowly",
        413: "the body is too large",
        500: "the backend failed",
        503: "the model's queue is full; retry after the Retry-After seconds",
        504: "the request waited in the queue past its timeout",
    }
    return {str(status): {"description": reasons[status], "content": _json(_ERROR)} for status in statuses}


def openapi_document(model_names: list[str]) -> dict[str, Any]:
    name = {
        "name": "name",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "enum": model_names} if model_names else {"type": "string"},
    }
    version = {"name": "version", "in": "path", "required": True, "schema": {"type": "string"}}
    metadata = {
        "type": "object",
        "required": ["name", "versions", "platform", "inputs", "outputs"],
        "properties": {
            "name": {"type": "string"},
            "versions": {"type": "array", "items": {"type": "string"}},
            "platform": {"type": "string"},
            "inputs": {"type": "array", "items": _TENSOR_METADATA},
            "outputs": {"type": "array", "items": _TENSOR_METADATA},
            "parameters": {"type": "object"},
        },
    }
    infer = {
        "post": {
            "summary": "Run the model on tensors, or on an image",
            "requestBody": {
                "required": True,
                "content": {
                    **_json(_INFER_REQUEST),
                    "image/jpeg": {"schema": {"type": "string", "format": "binary"}},
                    "image/png": {"schema": {"type": "string", "format": "binary"}},
                },
            },
            "responses": {
                "200": {
                    "description": "the outputs (tensors), or the result message (images)",
                    "content": _json({"oneOf": [_INFER_RESPONSE, _RESULT_MESSAGE]}),
                },
                **_errors(400, 401, 404, 408, 413, 500, 503, 504),
            },
        }
    }
    model_get = {
        "get": {
            "summary": "Model metadata",
            "responses": {"200": {"description": "metadata", "content": _json(metadata)}, **_errors(401, 404)},
        }
    }
    ready_get = {
        "get": {
            "summary": "Model readiness",
            "responses": {"200": {"description": "served", "content": _json({"type": "object"})}, **_errors(401, 404)},
        }
    }
    plain = {"get": {"responses": {"200": {"description": "ok", "content": _json({"type": "object"})}, **_errors(401)}}}
    with_name = {"parameters": [name]}
    with_version = {"parameters": [name, version]}
    return {
        "openapi": "3.0.3",
        "info": {"title": "edge-runtime inference (Open Inference Protocol v2)", "version": __version__},
        "paths": {
            "/v2": plain,
            "/v2/health/live": {
                "get": {"responses": {"200": {"description": "live", "content": _json({"type": "object"})}}}
            },
            "/v2/health/ready": {
                "get": {"responses": {"200": {"description": "ready", "content": _json({"type": "object"})}}}
            },
            "/v2/models/{name}": {**with_name, **model_get},
            "/v2/models/{name}/versions/{version}": {**with_version, **model_get},
            "/v2/models/{name}/ready": {**with_name, **ready_get},
            "/v2/models/{name}/versions/{version}/ready": {**with_version, **ready_get},
            "/v2/models/{name}/infer": {**with_name, **infer},
            "/v2/models/{name}/versions/{version}/infer": {**with_version, **infer},
        },
    }
