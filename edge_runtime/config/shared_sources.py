"""Checks of the top-level `sources:` against the pipelines that name them, each with its field path.

A named camera is opened once for all its pipelines, so what would pass on a pipeline's own source can
contradict itself here: a pipeline that names no source in `sources:`, a file that is not played in real
time (decoded as fast as the CPU allows, every pipeline would drop most of it), and the same camera opened
a second time beside its named capture, or named twice, which is what `sources:` is there to prevent. A
named source no pipeline uses is not an error, a camera may be set up before its pipelines, but it is said,
since it is not opened at all. (What each pipeline takes, its frame policy, max_fps and motion gate, is
not a setting of the named camera at all: the schema refuses it there.)
"""

from __future__ import annotations

from collections.abc import Iterator

from edge_runtime.config.parts import ConfigParts, PipelinePart
from edge_runtime.config.problems import FieldPath, Problem
from edge_runtime.sources.base import SourceConfig
from edge_runtime.sources.configs import CameraSourceConfig, SharedSourceConfig, StreamCamera, V4l2Camera, VideoFile

__all__ = ["camera_identity", "check_shared_sources", "unused_source_notes"]


def check_shared_sources(parts: ConfigParts, pipelines: list[PipelinePart]) -> list[Problem]:
    """Every contradiction between `sources:` and the started `pipelines` that read or duplicate them."""
    problems = list(_check_named(parts))
    owners: dict[str, str] = {}  # camera identity -> the named source that opens it
    for name, named_source in parts.sources:
        identity = camera_identity(named_source)
        if identity is not None:
            owners.setdefault(identity, name)
    for part in pipelines:
        source, at = part.source, (*part.at, "source")
        if isinstance(source, SharedSourceConfig):
            problems += _check_reference(source, at, parts.source_names)
        elif isinstance(source, CameraSourceConfig):
            identity = camera_identity(source)
            if identity is not None and identity in owners:
                field = _identity_field(source)
                problems.append(
                    Problem(
                        (*at, field),
                        f"this camera is also sources.{owners[identity]}, which opens it once for every pipeline "
                        f"that names it: write `source: {owners[identity]}` here instead of a second connection",
                    )
                )
    return problems


def unused_source_notes(parts: ConfigParts, pipelines: list[PipelinePart]) -> list[Problem]:
    """The named sources no started pipeline reads: said, not refused, since they are simply not opened."""
    used = {part.source.name for part in pipelines if isinstance(part.source, SharedSourceConfig)}
    return [
        Problem(("sources", name), "no enabled pipeline uses this source, so it is not opened")
        for name in parts.source_names
        if name not in used
    ]


def camera_identity(source: SourceConfig) -> str | None:
    """What tells one camera from another: its URL, its device node or its file."""
    if isinstance(source, StreamCamera):
        return f"stream:{source.url}"
    if isinstance(source, V4l2Camera):
        device = str(source.device)
        return f"v4l2:/dev/video{device}" if device.isdigit() else f"v4l2:{device}"
    if isinstance(source, VideoFile):
        return f"file:{source.path}"
    return None


def _identity_field(source: SourceConfig) -> str:
    if isinstance(source, StreamCamera):
        return "url"
    return "device" if isinstance(source, V4l2Camera) else "path"


def _check_named(parts: ConfigParts) -> Iterator[Problem]:
    seen: dict[str, str] = {}
    for name, source in parts.sources:
        at: FieldPath = ("sources", name)
        if isinstance(source, VideoFile) and not source.realtime:
            yield Problem(
                (*at, "realtime"),
                "a file shared by pipelines is played like a camera: set realtime: true (unpaced, it would be "
                "decoded as fast as the CPU allows and each pipeline would drop most of its frames)",
            )
        identity = camera_identity(source)
        if identity is not None and identity in seen:
            yield Problem(
                (*at, _identity_field(source)),
                f"the same camera as sources.{seen[identity]}: one name per camera, so that it is opened once",
            )
        elif identity is not None:
            seen[identity] = name


def _check_reference(source: SharedSourceConfig, at: FieldPath, names: tuple[str, ...]) -> Iterator[Problem]:
    if source.name not in names:
        known = ", ".join(names) or "none are given"
        yield Problem((*at, "name"), f"no source named {source.name!r} in sources: (known: {known})")
