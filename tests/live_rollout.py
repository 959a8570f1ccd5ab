"""Helpers the rollout tests share: a camera that runs until stopped, a sink that counts, signed releases."""

from __future__ import annotations

import shutil
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.base import Decoder
from edge_runtime.package.archive import pack
from edge_runtime.package.signing import sign_package
from edge_runtime.placement.model import LoadedModel
from edge_runtime.sources.base import Frame, Source, SourceConfig


class Camera(Source):
    """A camera at `fps` that keeps only the newest frame: what the pipeline does not take in time is dropped."""

    def __init__(self, image: np.ndarray, fps: float = 100.0) -> None:
        super().__init__(SourceConfig(), "camera")
        self._image, self._period = image, 1.0 / fps
        self._next = time.monotonic()

    def start(self) -> None:
        self.stats.connected = True

    def read(self, timeout: float) -> Frame | None:
        now = time.monotonic()
        missed = int((now - self._next) / self._period) if now > self._next else 0
        self.stats.dropped += missed
        self._next = max(self._next + self._period * (missed + 1), now)
        time.sleep(max(0.0, self._next - now))
        self.stats.delivered += 1
        return Frame(self._image, self.stats.delivered - 1, time.time(), self.name)

    def close(self) -> None:
        pass


class CountingSink:
    """Keeps every result message handed to it."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []
        self._lock = threading.Lock()

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        with self._lock:
            self.messages.append((topic, payload))

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.messages)


def decoder_of(model: LoadedModel) -> Decoder:
    spec = model.package.manifest.decoder
    assert spec is not None
    return make_decoder(spec.name, spec.params, model.package.manifest.labels)


def signed_release(
    source: Path, root: Path, key: Path, release: int, version: str, edit: Any = None, expires_in: float = 3600
) -> Path:
    """`source` copied to `root` as `version`, changed by `edit(manifest_dict, root)` if given, signed, packed."""
    package = root / f"release-{release}"
    shutil.copytree(source, package)
    manifest = yaml.safe_load((package / "model.yaml").read_text())
    manifest["version"] = version
    if edit is not None:
        edit(manifest, package)
    (package / "model.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    expires = datetime.now(timezone.utc) + timedelta(seconds=expires_in)
    sign_package(package, key, release, expires)
    return pack(package, root / f"release-{release}.tar")
