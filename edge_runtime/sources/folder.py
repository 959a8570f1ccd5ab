"""Still images from a folder, as if a camera had taken them one after the other.

Useful for batch jobs (a day of trail-camera pictures) and for checking a model on a box with no
camera. Files are taken in natural order (img2 before img10); the folder is listed again on every
pass of a loop, so pictures dropped in meanwhile are picked up. A file that cannot be decoded, or
whose header declares more than `max_image_pixels`, is counted as malformed, logged with its name and
why (once per file, even when looping), and skipped: one truncated or hostile upload must not stop a
batch, nor take the box's memory.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import cv2
import numpy as np

from edge_runtime.errors import ConfigError
from edge_runtime.sources.base import SourceContext
from edge_runtime.sources.configs import FolderSourceConfig as FolderConfig
from edge_runtime.sources.encoded import ImageError, decode_image
from edge_runtime.sources.frames import FrameSource

log = logging.getLogger(__name__)

_IDLE_PASS_WAIT_S = 1.0  # a looping folder with nothing readable is listed again at this pace
_MAX_REPORTED = 10_000  # unreadable files named in the log, each once, even when the folder loops


def natural_key(path: Path) -> list[int | str]:
    """Sort key that orders the numbers inside names by value: frame2.jpg before frame10.jpg."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", path.name)]


class ImageFolderSource(FrameSource):
    config: FolderConfig

    def __init__(self, config: FolderConfig, name: str, context: SourceContext | None = None) -> None:
        super().__init__(config, name, context, config)
        self._reported: set[Path] = set()

    def _prepare(self) -> None:
        if not self.config.path.is_dir():
            raise ConfigError(f"source {self.name}: image folder {self.config.path} does not exist")

    def listing(self) -> list[Path]:
        paths = (path for path in self.config.path.glob(self.config.pattern) if path.is_file())
        return sorted(paths, key=natural_key)

    def _capture(self) -> None:
        with self.stats.lock:
            self.stats.connected = True
        try:
            while not self.stopping:
                delivered = self._play(self.listing())
                if not self.config.loop:
                    if delivered == 0:
                        log.warning(
                            "source %s: no readable image matches %s in %s",
                            self.name,
                            self.config.pattern,
                            self.config.path,
                        )
                    return
                if delivered == 0 and self._wait(_IDLE_PASS_WAIT_S):
                    return
        finally:
            with self.stats.lock:
                self.stats.connected = False

    def _play(self, paths: list[Path]) -> int:
        """Offer each image once; returns how many could be decoded."""
        decoded = 0
        for path in paths:
            if self.stopping:
                break
            now = time.monotonic()
            if not self._admit(now):
                continue
            image = self._read(path)
            if image is None:
                continue
            decoded += 1
            self._offer(image, time.time(), now)
        return decoded

    def _read(self, path: Path) -> np.ndarray | None:
        """The image in `path`, sized from its header before it is decoded; None (counted, logged) if skipped.

        Formats whose header is not read here (TIFF, ...) are left to OpenCV and its own pixel limit."""
        try:
            data = path.read_bytes()
        except OSError as error:
            self._unreadable(path, f"cannot read it: {error.strerror or error}")
            return None
        try:
            return decode_image(data, self.config.max_image_pixels, "it")
        except ImageError as error:
            if error.reason != "format":
                self._unreadable(path, str(error))
                return None
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if image is None:
            self._unreadable(path, "OpenCV cannot decode it as an image")
        return image

    def _unreadable(self, path: Path, reason: str) -> None:
        with self.stats.lock:
            self.stats.malformed += 1
            self.stats.last_error = f"{path}: {reason}"
        if path not in self._reported and len(self._reported) < _MAX_REPORTED:
            self._reported.add(path)
            log.warning("source %s: skipping %s: %s", self.name, path, reason)
