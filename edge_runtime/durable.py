"""Files that survive a crash or a power cut whole: written beside their place, flushed, then renamed over it.

A reader sees the old content or the new, never a part. Renaming alone is not enough on power loss:
the data is flushed to disk before the rename, and the directory after it, so that the rename itself
is on disk when this returns. What the state directory holds (stored choices, measurements, the
spool's companions, rollout records) goes through here.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["replace_file", "sync_directory"]


def replace_file(path: Path, data: str | bytes) -> None:
    """Give `path` the content `data`, atomically and durably; raises OSError."""
    raw = data.encode() if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(raw)
            stream.flush()
            os.fsync(stream.fileno())
        Path(temporary).replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(temporary).unlink()
        raise
    sync_directory(path.parent)


def sync_directory(directory: Path) -> None:
    """Flush a directory's entries (a rename, a new file) to disk; a no-op where directories cannot be opened."""
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)
