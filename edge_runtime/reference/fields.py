"""The daemon's config schema as a tree of keys, read from the pydantic models themselves.

The reference page (`docs/reference/config.md`) and `edge-runtime config example` are both rendered from
this one walk, so neither can list a key the schema lacks or leave out one it has: a key added to a model
appears in both, with the description, limits and example written on its `Field`.
"""

from __future__ import annotations

import enum
import re
import types
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import yaml
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

__all__ = [
    "COMPUTED",
    "NAMED_ENTRY",
    "NO_DEFAULT",
    "NO_EXAMPLE",
    "SECTION",
    "Key",
    "Variant",
    "keys_of",
    "slug",
    "walk",
    "yaml_value",
]


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NO_DEFAULT = _Marker("NO_DEFAULT")  # a required key
COMPUTED = _Marker("COMPUTED")  # worked out when the file is loaded (from the environment); the description says how
SECTION = _Marker("SECTION")  # a mapping whose keys all have their own defaults
NO_EXAMPLE = _Marker("NO_EXAMPLE")
NAMED_ENTRY = "<name>"  # stands for each entry's name in the paths of a mapping of names to sections


@dataclass(frozen=True)
class Variant:
    """One member of a union chosen by a key's value, e.g. the source with `type: stream`."""

    discriminator: str
    tag: str
    keys: tuple[Key, ...]

    @property
    def description(self) -> str:
        return next(key.description for key in self.keys if key.name == self.discriminator)


@dataclass(frozen=True)
class Key:
    """One key of the file, with everything a reader needs to set it."""

    name: str
    path: str  # dotted, with `[]` for each list and `<name>` for each named entry passed through
    kind: str  # the type in words: "text", "integer", "list of text", "mapping"
    default: Any  # the value as YAML writes it, or NO_DEFAULT, COMPUTED or SECTION
    nullable: bool
    choices: tuple[Any, ...]  # the only values allowed (a Literal or an enum); empty when any value of `kind` goes
    limits: tuple[str, ...]  # ">= 1", "at most 256 characters", "matches `^...$`"
    description: str
    example: Any  # the first of `Field(examples=...)`, else NO_EXAMPLE
    keys: tuple[Key, ...]  # the keys of a nested mapping (or of each item of a list of mappings)
    variants: tuple[Variant, ...]  # a mapping whose keys depend on its discriminator's value
    repeated: bool  # a list of mappings: its keys' paths pass through `name[]`
    named: bool = False  # a mapping of names to mappings: its keys' paths pass through `name.<name>`

    @property
    def required(self) -> bool:
        return self.default is NO_DEFAULT

    @property
    def is_section(self) -> bool:
        return bool(self.keys or self.variants)

    @property
    def placeholder(self) -> Any:
        """What `config example` writes for a required key: its example, or its one allowed value."""
        if self.example is not NO_EXAMPLE:
            return self.example
        return self.choices[0] if len(self.choices) == 1 else NO_EXAMPLE


def keys_of(model: type[BaseModel], prefix: str = "") -> tuple[Key, ...]:
    return tuple(_key(name, field, f"{prefix}{name}") for name, field in model.model_fields.items())


def walk(keys: tuple[Key, ...]) -> Iterator[Key]:
    """Every key, depth first, the members of each union included."""
    for key in keys:
        yield key
        yield from walk(key.keys)
        for variant in key.variants:
            yield from walk(variant.keys)


def _key(name: str, field: FieldInfo, path: str) -> Key:
    shape = _Shape.of(field.annotation)
    repeated = shape.listed and bool(shape.models)
    inner = f"{path}[]." if repeated else f"{path}.{NAMED_ENTRY}." if shape.named else f"{path}."
    variants: tuple[Variant, ...] = ()
    keys: tuple[Key, ...] = ()
    discriminator = field.discriminator if isinstance(field.discriminator, str) else shape.discriminator
    if discriminator is not None:
        variants = tuple(_variant(discriminator, model, inner) for model in shape.models)
    elif len(shape.models) == 1:
        keys = keys_of(shape.models[0], inner)
    elif shape.models:
        raise TypeError(f"{path}: a union of mappings needs a discriminator to be documented")
    return Key(
        name=name,
        path=path,
        kind=shape.kind,
        default=_named_default(field) if shape.named else _default(field),
        nullable=shape.nullable,
        choices=shape.choices,
        limits=_limits(field.metadata, shape.kind) + shape.item_limits,
        description=" ".join((field.description or "").split()),
        example=field.examples[0] if field.examples else NO_EXAMPLE,
        keys=keys,
        variants=variants,
        repeated=repeated,
        named=shape.named,
    )


def _variant(discriminator: str, model: type[BaseModel], prefix: str) -> Variant:
    """The member's keys with its discriminator first and its required keys next, as a reader looks for them
    (in the model, the keys it inherits come first)."""
    [tag] = get_args(model.model_fields[discriminator].annotation)
    keys = keys_of(model, prefix)
    return Variant(
        discriminator, tag, tuple(sorted(keys, key=lambda key: (key.name != discriminator, not key.required)))
    )


def _default(field: FieldInfo) -> Any:
    if field.is_required():
        return NO_DEFAULT
    factory = field.default_factory
    if factory is None:
        return plain(field.default)
    if isinstance(factory, type) and issubclass(factory, BaseModel):
        return SECTION
    if factory in (list, tuple, dict):
        return plain(factory())
    return COMPUTED


def _named_default(field: FieldInfo) -> Any:
    """A mapping of names to sections as YAML writes it, each entry with the keys it sets apart from their
    defaults: `{default: {}}` is one entry named default that keeps every key's default."""
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if value is None or value is PydanticUndefined:
        return plain(value)
    return {name: entry.model_dump(mode="json", exclude_defaults=True) for name, entry in value.items()}


def yaml_value(value: Any) -> str:
    """A default or example as it is written in the file: `null`, `true`, `'5'`, `[]`, `rtsp://...`."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 16, allow_unicode=True)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def plain(value: Any) -> Any:
    """A value as YAML writes it: paths as text, enums as their value, tuples as lists."""
    if value is PydanticUndefined:
        return NO_DEFAULT
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


_SCALARS: dict[Any, str] = {
    str: "text",
    int: "integer",
    float: "number",
    bool: "true/false",
    Path: "path",
    SecretStr: "text (secret)",
    Any: "any value",
}


@dataclass(frozen=True)
class _Shape:
    """What an annotation allows, in words, with the models it nests."""

    kind: str
    nullable: bool = False
    choices: tuple[Any, ...] = ()
    models: tuple[type[BaseModel], ...] = ()
    listed: bool = False  # a list, whose items are the models
    named: bool = False  # a mapping of names to the models
    item_limits: tuple[str, ...] = ()
    discriminator: str | None = None  # the key that tells the models apart, where a union nested in a mapping says

    @classmethod
    def of(cls, annotation: Any) -> _Shape:
        origin = get_origin(annotation)
        if origin is Annotated:
            base, *metadata = get_args(annotation)
            shape = cls.of(base)
            limits = tuple(_limits(_constraints(metadata), shape.kind))
            tags = [item.discriminator for item in metadata if isinstance(item, FieldInfo)]
            discriminator = next((tag for tag in tags if isinstance(tag, str)), shape.discriminator)
            return replace(shape, item_limits=shape.item_limits + limits, discriminator=discriminator)
        if origin is Union or origin is types.UnionType:
            members = [a for a in get_args(annotation) if a is not type(None)]
            nullable = len(members) < len(get_args(annotation))
            shapes = [cls.of(member) for member in members]
            if len(shapes) == 1:
                return replace(shapes[0], nullable=nullable)
            models = tuple(m for shape in shapes for m in shape.models)
            kinds = " or ".join(dict.fromkeys(shape.kind for shape in shapes))
            return _Shape(kinds, nullable, models=models, listed=shapes[0].listed)
        if origin is Literal:
            values = get_args(annotation)
            return _Shape(" or ".join(dict.fromkeys(_SCALARS[type(v)] for v in values)), choices=values)
        if origin in (tuple, list):
            item = cls.of(get_args(annotation)[0])
            limits = tuple(f"each {limit}" for limit in item.item_limits)
            return _Shape(f"list of {_plural(item.kind)}", models=item.models, listed=True, item_limits=limits)
        if origin is dict:
            key, value = (cls.of(arg) for arg in get_args(annotation))
            if value.models:
                kind = f"mapping of {key.kind} to {_plural(value.kind)}"
                return _Shape(kind, models=value.models, named=True, discriminator=value.discriminator)
            return _Shape("mapping" if value.kind == "any value" else f"mapping of {key.kind} to {value.kind}")
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return _Shape("mapping", models=(annotation,))
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return _Shape("text", choices=tuple(member.value for member in annotation))
        if annotation in _SCALARS:
            return _Shape(_SCALARS[annotation])
        raise TypeError(f"no words for the config type {annotation!r}")


def _plural(kind: str) -> str:
    if kind in ("text", "text (secret)", "any value") or kind.startswith(("list", "text or")):
        return kind
    words = {"true/false": "true/false values", "mapping": "mappings", "path or mapping": "paths or mappings"}
    return words.get(kind, f"{kind}s")


def _constraints(metadata: list[Any]) -> list[Any]:
    """The constraints inside `Annotated[...]`: annotated-types objects, or a Field's own metadata."""
    found: list[Any] = []
    for item in metadata:
        found += item.metadata if isinstance(item, FieldInfo) else [item]
    return found


def _limits(metadata: list[Any], kind: str) -> tuple[str, ...]:
    """A field's constraints in words, e.g. `>= 1`, `at least 1 item`, "matches `^[a-z]+$`"."""
    unit = "character" if kind.startswith("text") else "item"
    limits = []
    for item in metadata:
        if isinstance(item, annotated_types.Gt):
            limits.append(f"> {item.gt}")
        elif isinstance(item, annotated_types.Ge):
            limits.append(f">= {item.ge}")
        elif isinstance(item, annotated_types.Lt):
            limits.append(f"< {item.lt}")
        elif isinstance(item, annotated_types.Le):
            limits.append(f"<= {item.le}")
        elif isinstance(item, annotated_types.MinLen):
            limits.append(f"at least {item.min_length} {unit}{'s' if item.min_length != 1 else ''}")
        elif isinstance(item, annotated_types.MaxLen):
            limits.append(f"at most {item.max_length} {unit}{'s' if item.max_length != 1 else ''}")
        elif getattr(item, "pattern", None) is not None:
            limits.append(f"matches `{item.pattern}`")
    return tuple(limits)


def slug(text: str) -> str:
    """An anchor for a heading: `pipelines[].source` with `stream` -> `pipelines-source-stream`."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
