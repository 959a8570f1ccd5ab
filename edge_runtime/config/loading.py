"""Loading the daemon's config file: read, fill in secrets, validate, resolve paths, check the files.

Problems are collected before anything is raised, so one `check-config` run lists them together,
each with the file, line and field: those of the YAML, the secrets and the schema first, then, once
the schema is satisfied, those of the files the config names. Relative paths anywhere in the file are relative to the
file's own directory, so a config and the models beside it can move together.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from edge_runtime.config.checks import check_files
from edge_runtime.config.describe import describe, kind_of
from edge_runtime.config.directories import default_cache_dir, default_state_dir
from edge_runtime.config.document import Document, YamlSyntaxError, read_document
from edge_runtime.config.problems import ConfigFileError, Problem
from edge_runtime.config.schema import DaemonConfig

M = TypeVar("M", bound=BaseModel)


def load_config(path: Path | str, environ: Mapping[str, str] | None = None) -> DaemonConfig:
    """The validated config, or ConfigFileError listing every problem (secrets masked, safe to log).

    `environ` (default: the process environment) supplies `${NAME}` values, $CREDENTIALS_DIRECTORY and
    the default state and cache directories ($STATE_DIRECTORY, $CACHE_DIRECTORY).
    """
    path = Path(path)
    environ = os.environ if environ is None else environ
    file = str(path)
    document = _read(path, environ, file)
    if not isinstance(document.data, dict):
        found = "an empty file" if document.data is None else kind_of(document.data)
        raise ConfigFileError(file, [Problem((), f"expected a mapping of settings, found {found}").render(file)])
    defaults = {"state_dir": default_state_dir(environ), "cache_dir": default_cache_dir(environ)}
    try:
        config = DaemonConfig.model_validate(defaults | document.data)
    except ValidationError as error:
        schema_problems = _not_caused_by_substitution(describe(error, DaemonConfig, document), document.problems)
        raise _error(file, document, document.problems + schema_problems) from None
    if document.problems:
        raise _error(file, document, document.problems)
    config = resolve_paths(config, path.parent.absolute())
    if problems := check_files(config):
        raise _error(file, document, [Problem(p.path, p.message, document.line_of(p.path or ())) for p in problems])
    return config


def _error(file: str, document: Document, problems: list[Problem]) -> ConfigFileError:
    """Secrets masked in the messages only: a short one must not mangle the file name."""
    masked = [Problem(p.path, document.mask(p.message), p.line) for p in problems]
    return ConfigFileError(file, [problem.render(file) for problem in masked])


def _read(path: Path, environ: Mapping[str, str], file: str) -> Document:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigFileError(file, [f"{file}: cannot read: {error.strerror}"]) from None
    except UnicodeDecodeError:
        raise ConfigFileError(file, [f"{file}: not a text file (UTF-8 expected)"]) from None
    try:
        return read_document(text, environ)
    except YamlSyntaxError as error:
        raise ConfigFileError(file, [error.problem.render(file)]) from None


def _not_caused_by_substitution(problems: list[Problem], substitution: list[Problem]) -> list[Problem]:
    """A value whose `${NAME}` or credential could not be filled in fails validation too; say it once."""
    failed = [p.path for p in substitution if p.path is not None]
    return [p for p in problems if not any(p.path is not None and p.path[: len(f)] == f for f in failed)]


def resolve_paths(model: M, base: Path) -> M:
    """`model` with every relative Path field, at any depth, made relative to `base`."""
    update: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        resolved = _resolve_value(value, base)
        if resolved is not value:
            update[name] = resolved
    return model.model_copy(update=update) if update else model


def _resolve_value(value: Any, base: Path) -> Any:
    if isinstance(value, Path):
        return value if value.is_absolute() else base / value
    if isinstance(value, BaseModel):
        return resolve_paths(value, base)
    if isinstance(value, tuple) and any(isinstance(item, (BaseModel, Path)) for item in value):
        items = tuple(_resolve_value(item, base) for item in value)
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value
