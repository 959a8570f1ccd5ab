"""Pydantic's validation errors as problems a user can act on: the field as written, its line, a hint.

Pydantic reports locations in its own terms: a discriminated union adds the tag (`source.stream.url`),
a plain union adds one entry per member type (`device.str`, `device.int`). These are folded back
into the path as it appears in the file, and the union's per-member errors into one problem.
"""

from __future__ import annotations

import difflib
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from edge_runtime.config.document import Document
from edge_runtime.config.problems import FieldPath, Problem
from edge_runtime.sources.configs import AnySource


def _source_types() -> tuple[str, ...]:
    members = get_args(get_args(AnySource)[0])
    return tuple(get_args(member.model_fields["type"].annotation)[0] for member in members)


SOURCE_TYPES = _source_types()


def describe(error: ValidationError, schema: type[BaseModel], document: Document) -> list[Problem]:
    messages: dict[FieldPath, list[str]] = {}
    for detail in error.errors():
        path = file_path(detail["loc"], document.data)
        message = _message(detail, path, schema, document.data)
        if message not in messages.setdefault(path, []):
            messages[path].append(message)
    return [Problem(path, "; or ".join(texts), document.line_of(path)) for path, texts in messages.items()]


_MISSING = object()


def file_path(loc: tuple[int | str, ...], data: Any) -> FieldPath:
    """The location as the user wrote it, following the data instead of pydantic's union tags."""
    path: list[int | str] = []
    current = data
    for item in loc:
        if isinstance(item, str) and item.startswith("function-"):
            continue
        if isinstance(current, dict) and item not in current and current.get("type") == item:
            continue  # the tag pydantic adds for a member of a discriminated union
        if path and current is not _MISSING and not isinstance(current, (dict, list)):
            break  # a value in the file: what pydantic adds below it names union member types
        current = _child(current, item)
        path.append(item)
    return tuple(path)


def _child(container: Any, item: int | str) -> Any:
    if isinstance(container, dict) and isinstance(item, str):
        return container.get(item, _MISSING)
    if isinstance(container, list) and isinstance(item, int) and 0 <= item < len(container):
        return container[item]
    return _MISSING


def _message(detail: ErrorDetails, path: FieldPath, schema: type[BaseModel], data: Any) -> str:
    kind = detail["type"]
    if kind == "extra_forbidden":
        return _unknown_field(path, schema, data)
    if kind == "union_tag_not_found":
        return f"missing field 'type' (one of: {', '.join(SOURCE_TYPES)})"
    if kind == "union_tag_invalid":
        context = detail.get("ctx", {})
        expected = str(context.get("expected_tags", "")).replace("'", "") or ", ".join(SOURCE_TYPES)
        return f"unknown source type '{context.get('tag', '')}'; expected one of: {expected}"
    if kind == "missing":
        return "required field is missing"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping of fields, found {kind_of(detail['input'])}"
    if kind in ("tuple_type", "list_type"):
        return f"expected a list, found {kind_of(detail['input'])}"
    if kind == "string_type" and isinstance(detail["input"], (int, float)) and detail["loc"][-1:] == path[-1:]:
        return f"expected text, found {kind_of(detail['input'])}; put it in quotes to use it as text"
    return detail["msg"].removeprefix("Value error, ")


def kind_of(value: Any) -> str:
    """What the file holds, by kind only: the value itself may be a secret."""
    if value is None:
        return "no value"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    return "a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict) else type(value).__name__


def _unknown_field(path: FieldPath, schema: type[BaseModel], data: Any) -> str:
    model = model_at(schema, path[:-1], data)
    if model is None:
        return "unknown field"
    known = [name for name in model.model_fields if name != "type"]
    close = difflib.get_close_matches(str(path[-1]), known, n=1, cutoff=0.6)
    if close:
        return f"unknown field; did you mean '{close[0]}'?"
    return f"unknown field; expected one of: {', '.join(known)}"


def model_at(schema: type[BaseModel], path: FieldPath, data: Any) -> type[BaseModel] | None:
    """The model class that validates the mapping at `path`, picking union members by their `type`."""
    annotation: Any = schema
    current = data
    for item in path:
        if isinstance(item, int):
            args = [a for a in get_args(annotation) if a is not Ellipsis]
            annotation = args[0] if args else None
            current = _child(current, item)
            continue
        model = _as_model(annotation, current)
        if model is None or item not in model.model_fields:
            return None
        annotation = model.model_fields[item].annotation
        current = _child(current, item)
    return _as_model(annotation, current)


def _as_model(annotation: Any, data: Any) -> type[BaseModel] | None:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _as_model(get_args(annotation)[0], data)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if origin is Union or origin is types.UnionType:
        models = [m for a in get_args(annotation) if (m := _as_model(a, data)) is not None]
        if len(models) == 1:
            return models[0]
        tag = data.get("type") if isinstance(data, dict) else None
        for model in models:
            type_field = model.model_fields.get("type")
            if type_field is not None and tag in get_args(type_field.annotation):
                return model
    return None
