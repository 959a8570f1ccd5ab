"""Measurements a box makes once and remembers across starts, in one JSON file of the state directory.

Each entry is keyed by a digest of what decides the figure (the model's files, the backend and
device, the box), so a new model, backend or CPU is measured afresh and nothing stale is trusted.
The file is replaced atomically, so a crash mid-write leaves the previous one; a file that cannot be
read or has another layout is ignored, and the figures are measured again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from edge_runtime.durable import replace_file

__all__ = ["MeasurementStore", "measurement_key"]

log = logging.getLogger(__name__)


def measurement_key(identity: dict[str, Any]) -> str:
    """A stable digest of what a measurement depends on."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


class MeasurementStore:
    """`<state_dir>/<file_name>` holding `{"version": n, "entries": {key: {...}}}`; no state dir stores nothing."""

    def __init__(self, state_dir: Path | None, file_name: str, version: int, what: str) -> None:
        self.path = state_dir / file_name if state_dir is not None else None
        self.version = version
        self.what = what  # for log lines: "int8 checks", "batching choices"

    def entries(self) -> list[dict[str, Any]]:
        return [entry for entry in self._read().values() if isinstance(entry, dict)]

    def get(self, key: str) -> dict[str, Any] | None:
        entry = self._read().get(key)
        return entry if isinstance(entry, dict) else None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        if self.path is None:
            return
        entries = self._read()
        entries[key] = entry
        text = json.dumps({"version": self.version, "entries": entries}, indent=2, sort_keys=True)
        try:
            replace_file(self.path, text + "\n")
        except OSError as error:
            log.warning("cannot store %s in %s (%s); measured again at the next start", self.what, self.path, error)

    def _read(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            log.warning("ignoring unreadable %s %s (%s); they are measured again", self.what, self.path, error)
            return {}
        if not isinstance(data, dict) or data.get("version") != self.version:
            return {}
        if not isinstance(data.get("entries"), dict):
            return {}
        return dict(data["entries"])
