"""Pipelines an operator disabled by command, kept in the state directory so that a restart keeps them off.

The config file stays as its author wrote it; the daemon runs the config with these pipelines turned
off. `status` lists them, and `pipeline enable` takes one off the list.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from edge_runtime.config.schema import DaemonConfig
from edge_runtime.durable import replace_file

__all__ = ["DisabledPipelines"]

log = logging.getLogger(__name__)


class DisabledPipelines:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "pipelines-disabled.json"

    def names(self) -> list[str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as error:
            log.error("ignoring %s (%s): every configured pipeline runs", self.path, error)
            return []
        return sorted(str(name) for name in data) if isinstance(data, list) else []

    def set(self, name: str, enabled: bool) -> None:
        names = set(self.names())
        names = names - {name} if enabled else names | {name}
        replace_file(self.path, json.dumps(sorted(names)))

    def applied(self, config: DaemonConfig) -> DaemonConfig:
        """`config` with the disabled pipelines turned off."""
        off = set(self.names())
        if not off:
            return config
        pipelines = tuple(p.model_copy(update={"enabled": False}) if p.name in off else p for p in config.pipelines)
        return config.model_copy(update={"pipelines": pipelines})
