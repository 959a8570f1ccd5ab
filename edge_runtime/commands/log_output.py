"""Where log lines go and what they look like, for a terminal and for journald alike.

journald stamps every line itself, so under systemd a line is `LEVEL logger: message`; anywhere else
(a shell, `docker logs`, a file) it starts with the local time, to the millisecond. systemd tells its
services apart by `$JOURNAL_STREAM`, the device and inode of the stream it connected to stderr.

OpenCV and FFmpeg write to the process's stderr from C, past Python's logging: every failed RTSP
attempt would add FFmpeg's `[tcp @ 0x...] Connection ... failed` and OpenCV's `VIDEOIO(FFMPEG)` warning
to the log. The sources say what went wrong in one line of their own, so the native messages are
silenced unless debugging (`-vv`) or the user set the variables themselves.
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["configure_logging", "under_journald"]

_NATIVE_QUIET = {"OPENCV_LOG_LEVEL": "ERROR", "OPENCV_FFMPEG_LOGLEVEL": "-8"}  # -8: FFmpeg's AV_LOG_QUIET


def under_journald() -> bool:
    """True when stderr is the stream systemd connected to the journal."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    device, _, inode = stream.partition(":")
    if not (device.isdigit() and inode.isdigit()):
        return False
    try:
        status = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (status.st_dev, status.st_ino) == (int(device), int(inode))


def configure_logging(level: int) -> None:
    """Set up the root logger once, at `level`, and quiet the native libraries unless debugging."""
    stamp = "" if under_journald() else "%(asctime)s.%(msecs)03d "
    logging.basicConfig(level=level, format=f"{stamp}%(levelname)s %(name)s: %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    if level <= logging.DEBUG:
        return
    chosen_by_user = set(_NATIVE_QUIET).intersection(os.environ)
    for variable, value in _NATIVE_QUIET.items():
        os.environ.setdefault(variable, value)
    cv2 = sys.modules.get("cv2")  # already imported, OpenCV has read its variable; FFmpeg reads its own later
    if cv2 is not None and "OPENCV_LOG_LEVEL" not in chosen_by_user:
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
