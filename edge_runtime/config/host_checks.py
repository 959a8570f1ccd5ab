"""Checks of what a config needs from the box itself: the inputs its sources read and the directories it writes.

A source whose file, folder or replay file is not there, and a state or cache directory that cannot be
made, are refused before anything starts, with the field that names them: `run` would otherwise fail
at the first frame or the first write, with a message naming neither field nor line. A video file is
opened and one frame decoded, the check a file source makes when it starts (cheap: one frame of a
local file). A camera or serial port whose device node does not exist is only said (`device_notes`):
a USB camera unplugged at boot must not keep the box's other pipelines from starting, and its source
retries until it is plugged in. Stream URLs are not tried: a network camera down at start is an
outage the source rides out, not a mistake in the file.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

from edge_runtime.config.directories import unusable_directory
from edge_runtime.config.parts import ConfigParts, PipelinePart
from edge_runtime.config.problems import FieldPath, Problem
from edge_runtime.errors import ConfigError
from edge_runtime.sources.base import SourceConfig
from edge_runtime.sources.configs import (
    FolderSourceConfig,
    ReplaySourceConfig,
    SerialSourceConfig,
    V4l2Camera,
    VideoFile,
)

__all__ = [
    "check_directories",
    "check_source",
    "check_source_at",
    "device_notes",
    "device_notes_at",
    "v4l2_device_path",
]


def check_source(part: PipelinePart) -> Iterator[Problem]:
    return check_source_at(part.source, (*part.at, "source"))


def check_source_at(source: SourceConfig | None, at: FieldPath) -> Iterator[Problem]:
    """The inputs of the source at `at`, a pipeline's own or one named in `sources:`."""
    try:
        yield from _check_source(source, at)
    except OSError as error:  # a file or folder this user may not read
        yield Problem(at, f"cannot read {error.filename}: {error.strerror}")


def _check_source(source: SourceConfig | None, at: FieldPath) -> Iterator[Problem]:
    if isinstance(source, VideoFile):
        from edge_runtime.sources.camera import probe_video_file  # imports OpenCV: only for file sources

        try:
            probe_video_file(source.path)
        except ConfigError as error:
            yield Problem((*at, "path"), str(error))
    elif isinstance(source, FolderSourceConfig):
        if not source.path.is_dir():
            yield Problem((*at, "path"), f"image folder {source.path} {_missing_or_not('a folder', source.path)}")
    elif isinstance(source, ReplaySourceConfig):
        if not source.path.is_file():
            yield Problem((*at, "path"), f"replay file {source.path} {_missing_or_not('a file', source.path)}")
    elif isinstance(source, SerialSourceConfig) and importlib.util.find_spec("serial") is None:
        yield Problem((*at, "type"), "serial sources need pyserial: pip install 'edge-runtime[serial]'")


def device_notes(part: PipelinePart) -> Iterator[Problem]:
    """Cameras and serial ports that are not there now. Not a problem: a USB camera unplugged at boot must
    not keep the box's other pipelines from starting, and its own starts once it is plugged in (the source
    retries), so these are said as warnings by check-config and run alike."""
    return device_notes_at(part.source, (*part.at, "source"))


def device_notes_at(source: SourceConfig | None, at: FieldPath) -> Iterator[Problem]:
    """`device_notes` for the source at `at`, a pipeline's own or one named in `sources:`."""
    if isinstance(source, V4l2Camera):
        device = v4l2_device_path(source.device)
        if not Path(device).exists():
            yield Problem((*at, "device"), f"video device {device} does not exist now (is the camera plugged in?)")
    elif isinstance(source, SerialSourceConfig):
        local = source.port.startswith("/")  # not pyserial's URLs (socket://...)
        if local and not Path(source.port).exists():
            yield Problem((*at, "port"), f"serial port {source.port} does not exist now (is the device plugged in?)")


def v4l2_device_path(device: str | int) -> str:
    """`/dev/videoN` for the index N, the path itself otherwise, as the camera source opens it."""
    text = str(device)
    return f"/dev/video{text}" if text.isdigit() else text


def _missing_or_not(kind: str, path: Path) -> str:
    return f"is not {kind}" if os.path.lexists(path) else "does not exist"


def check_directories(parts: ConfigParts) -> Iterator[Problem]:
    """The directories the daemon creates and writes: state (spool, stored choices), cache, a spool elsewhere."""
    if parts.state_dir is not None and (problem := unusable_directory(parts.state_dir)):
        yield Problem(("state_dir",), problem)
    if parts.cache_dir is not None and (problem := unusable_directory(parts.cache_dir)):
        yield Problem(("cache_dir",), problem)
    spool = parts.spool.path if parts.spool is not None else None
    if spool is not None and (problem := unusable_directory(spool.parent)):
        yield Problem(("mqtt", "spool", "path"), problem)
