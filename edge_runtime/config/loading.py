"""Loading the daemon's config file: read, fill in secrets, validate, resolve paths, check against the box.

`check-config`, `run`, a reload and a remote `config validate` all load through here, so each refuses
the same configs with the same lines. Problems are collected before anything is raised, so one run
lists them together, each with the file, line and field: those of the YAML, the secrets and the schema
first, then those of the files, devices, models and directories the config names, checked on every
part of the file that validated (`parts`), whether or not the rest did. Relative paths anywhere in the
file are relative to the file's own directory, so a config and the models beside it can move together.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from edge_runtime.config.checks import check_parts, note_parts, unused_parts
from edge_runtime.config.describe import describe, kind_of
from edge_runtime.config.directories import default_cache_dir, default_state_dir
from edge_runtime.config.document import Document, YamlSyntaxError, read_document
from edge_runtime.config.parts import parts_of, resolve_paths, salvage_parts
from edge_runtime.config.problems import ConfigFileError, Problem
from edge_runtime.config.schema import DaemonConfig

__all__ = ["load_config", "resolve_paths"]


log = logging.getLogger(__name__)


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
    data = defaults | document.data
    base = path.parent.absolute()
    config: DaemonConfig | None = None
    try:
        config = resolve_paths(DaemonConfig.model_validate(data), base)
    except ValidationError as error:
        schema_problems = describe(error, DaemonConfig, document)
    else:
        schema_problems = []
    parts = parts_of(config) if config is not None else salvage_parts(data, base)
    checked = [Problem(p.path, p.message, document.line_of(p.path or ())) for p in check_parts(parts)]
    problems = document.problems + _not_caused_by_substitution(schema_problems + checked, document.problems)
    if problems or config is None:
        raise _error(file, document, problems)
    for note in note_parts(parts):
        rendered = Problem(note.path, note.message, document.line_of(note.path or ())).render(file)
        log.warning("%s; the pipeline starts without it and keeps trying", rendered)
    for note in unused_parts(parts):
        log.warning("%s", Problem(note.path, note.message, document.line_of(note.path or ())).render(file))
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
