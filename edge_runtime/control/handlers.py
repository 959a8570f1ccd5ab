"""What each operator command does on the box; reached only through a verified signature (see `signed`).

    status                          the stats report, the rollouts, the pipelines disabled by command
    config get                      the config file as it is on disk
    config validate {text}          the problems a config text would have here, each with its field path
    config apply {text}             validated as a whole, then written and reloaded as SIGHUP reloads
    pipeline enable|disable {name}  kept in the state directory, so a restart keeps it
    snapshot {name}                 the pipeline's last frame with its detections drawn, as base64 JPEG
    models list                     models loaded, and the releases installed and active per package
    rollout start {rollout_id, package, url, sha256[, downgrade_to]}
    rollout abort {rollout_id}
    rollback {package[, release]}   a rollout back to an installed release (by default the one that ran
                                    committed before the active one, the config's package included)

A handler answers a mapping, or raises CommandFailed with an HTTP-like code: the reply carries both.
"""

from __future__ import annotations

import base64
import contextlib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_runtime.config import load_config
from edge_runtime.config.problems import ConfigFileError
from edge_runtime.durable import replace_file
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.store import ModelStore
from edge_runtime.pipeline.outputs import annotate_jpeg
from edge_runtime.pipeline.streaming import Pipeline
from edge_runtime.rollout.manager import RolloutRequest, Rollouts
from edge_runtime.sources.base import Frame

__all__ = ["COMMANDS", "CommandFailed", "ControlContext", "run_command"]

MAX_CONFIG_BYTES = 1 << 20


class CommandFailed(EdgeRuntimeError):  # noqa: N818 - answered to the operator with its code
    def __init__(self, code: int, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


@dataclass(frozen=True)
class ControlContext:
    """What commands act on: the daemon's report, config file, pipelines and rollouts."""

    config_file: Path
    report: Callable[[], dict[str, Any]]
    reload: Callable[[], None]  # the path SIGHUP takes
    pipelines: Callable[[], Mapping[str, Pipeline]]
    disabled: Callable[[], list[str]]
    set_enabled: Callable[[str, bool], None]
    models: Callable[[], list[dict[str, Any]]]
    store: ModelStore
    rollouts: Rollouts


Handler = Callable[[ControlContext, dict[str, Any]], dict[str, Any]]


def _status(context: ControlContext, args: dict[str, Any]) -> dict[str, Any]:
    return {"report": context.report(), "rollouts": context.rollouts.status(), "disabled": context.disabled()}


def _config_get(context: ControlContext, args: dict[str, Any]) -> dict[str, Any]:
    return {"file": str(context.config_file), "text": context.config_file.read_text(encoding="utf-8")}


def _problems(context: ControlContext, text: str) -> list[str]:
    """The problems `text` would have as this box's config; it is checked beside the real file, so relative
    paths mean the same, and removed again."""
    if len(text.encode()) > MAX_CONFIG_BYTES:
        raise CommandFailed(413, f"the config text is over {MAX_CONFIG_BYTES} bytes")
    candidate = context.config_file.with_name(f".{context.config_file.name}.{uuid.uuid4().hex}.candidate")
    try:
        replace_file(candidate, text)
        load_config(candidate)
    except ConfigFileError as error:
        return [line.replace(str(candidate), context.config_file.name) for line in error.problems]
    except EdgeRuntimeError as error:
        return [str(error).replace(str(candidate), context.config_file.name)]
    finally:
        with contextlib.suppress(OSError):
            candidate.unlink()
    return []


def _config_validate(context: ControlContext, args: dict[str, Any]) -> dict[str, Any]:
    problems = _problems(context, _text(args))
    return {"valid": not problems, "problems": problems}


def _config_apply(context: ControlContext, args: dict[str, Any]) -> dict[str, Any]:
    text = _text(args)
    problems = _problems(context, text)
    if problems:
        raise CommandFailed(422, "the config is invalid; nothing was applied", problems)
    previous = context.config_file.read_bytes()
    replace_file(context.config_file.with_name(context.config_file.name + ".previous"), previous)
    replace_file(context.config_file, text)
    context.reload()
    return {"applied": True, "previous": context.config_file.name + ".previous"}


def _pipeline(enabled: bool) -> Handler:
    def switch(context: ControlContext, args: dict[str, Any]) -> dict[str, Any]:
        name = _name(args, "name")
        context.set_enabled(name, enabled)
        context.reload()
        return {"pipeline": name, "enabled": enabled}

    return switch


def _snapshot(context: ControlContext, args: dict[str, Any]) -> dict[str, Any]:
    name = _name(args, "name")
    pipeline = context.pipelines().get(name)
    if pipeline is None:
        raise CommandFailed(404, f"no pipeline {name!r} runs here")
    described = pipeline.last_described
    if described is None or not isinstance(described.item, Frame):
        raise CommandFailed(409, f"pipeline {name!r} has no frame yet")
    jpeg = annotate_jpeg(described.item.image, getattr(described.decoded, "detections", ()), 85)
    return {"pipeline": name, "index": described.item.index, "jpeg": base64.b64encode(jpeg).decode()}


def _models(context: ControlContext, args: dict[str, Any]) -> dict[str, Any]:
    loaded = context.models()
    packages = sorted({entry["package"] for entry in loaded})
    installed = {}
    for package in packages:
        active = context.store.active(package)
        releases = context.store.installed(package)
        installed[package] = {"installed": releases, "active": active.release if active else None}
    return {"loaded": loaded, "releases": installed}


def _rollout_start(context: ControlContext, args: dict[str, Any]) -> dict[str, Any]:
    downgrade = args.get("downgrade_to")
    if downgrade is not None and not isinstance(downgrade, int):
        raise CommandFailed(400, "downgrade_to must be a release number")
    request = RolloutRequest(
        _name(args, "rollout_id"), _name(args, "package"), _name(args, "url"), _name(args, "sha256"), downgrade
    )
    return {"rollout": context.rollouts.start(request).to_dict()}


def _rollout_abort(context: ControlContext, args: dict[str, Any]) -> dict[str, Any]:
    rollout_id = _name(args, "rollout_id")
    context.rollouts.abort(rollout_id)
    return {"rollout_id": rollout_id, "aborting": True}


def _rollback(context: ControlContext, args: dict[str, Any]) -> dict[str, Any]:
    package = _name(args, "package")
    release = args.get("release")  # None: the one that ran committed before the active one
    if release is not None and (not isinstance(release, int) or isinstance(release, bool)):
        raise CommandFailed(400, "release must be a release number")
    named = "" if release is None else f"{release}-"
    rollout_id = str(args.get("rollout_id") or f"rollback-{package}-{named}{uuid.uuid4().hex[:8]}")
    return {"rollout": context.rollouts.roll_back_to(rollout_id, package, release).to_dict()}


COMMANDS: dict[str, Handler] = {
    "status": _status,
    "config get": _config_get,
    "config validate": _config_validate,
    "config apply": _config_apply,
    "pipeline enable": _pipeline(True),
    "pipeline disable": _pipeline(False),
    "snapshot": _snapshot,
    "models list": _models,
    "rollout start": _rollout_start,
    "rollout abort": _rollout_abort,
    "rollback": _rollback,
}


def run_command(context: ControlContext, name: str, args: dict[str, Any]) -> dict[str, Any]:
    handler = COMMANDS.get(name)
    if handler is None:
        raise CommandFailed(404, f"unknown command {name[:60]!r}; known: {', '.join(COMMANDS)}")
    try:
        return handler(context, args)
    except CommandFailed:
        raise
    except EdgeRuntimeError as error:
        raise CommandFailed(409, str(error)) from None


def _name(args: dict[str, Any], field: str) -> str:
    value = args.get(field)
    if not isinstance(value, str) or not value or len(value) > 2048:
        raise CommandFailed(400, f"args.{field} must be a non-empty string")
    return value


def _text(args: dict[str, Any]) -> str:
    text = args.get("text")
    if not isinstance(text, str):
        raise CommandFailed(400, "args.text must hold the config file's text")
    return text
