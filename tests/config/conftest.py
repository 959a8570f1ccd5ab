"""Config files written to a temporary directory, pointing at the real bundled face detector package and a real
video beside the file, so that a config passes its checks against the box unless a test breaks it."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ConfigWriter = Callable[[Any], Path]
CommandRunner = Callable[..., subprocess.CompletedProcess[str]]
REPO = Path(__file__).resolve().parents[2]
# What systemd sets for the service: a test runs the command as from a shell, unless it sets them itself.
SERVICE_VARIABLES = ("STATE_DIRECTORY", "CACHE_DIRECTORY", "CREDENTIALS_DIRECTORY", "NOTIFY_SOCKET", "WATCHDOG_USEC")


def dump(data: Any) -> str:
    """YAML of `data`; a string value "!credential NAME" is written as the tag, the way an admin writes it."""
    text = yaml.dump(data, sort_keys=False)
    return re.sub(r"'(!credential [^']+)'", r"\1", text)


SAMPLE_VIDEO = REPO / "samples" / "videos" / "astronaut.mp4"


@pytest.fixture
def base_config(face_package_dir: Path, tmp_path: Path) -> dict[str, Any]:
    """Reads <tmp>/etc/video.mp4, the bundled sample video."""
    (tmp_path / "etc").mkdir(exist_ok=True)
    (tmp_path / "etc" / "video.mp4").symlink_to(SAMPLE_VIDEO)
    return copy.deepcopy(
        {
            "device_id": "box-1",
            "mqtt": {"host": "localhost"},
            "pipelines": [
                {
                    "name": "faces",
                    "source": {"type": "file", "path": "video.mp4"},
                    "model": {"path": str(face_package_dir)},
                }
            ],
        }
    )


@pytest.fixture
def write_config(tmp_path: Path) -> ConfigWriter:
    """Writes a mapping (as YAML) or raw text to <tmp>/etc/config.yaml."""

    def write(content: Any) -> Path:
        path = tmp_path / "etc" / "config.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(content if isinstance(content, str) else dump(content), encoding="utf-8")
        return path

    return write


@pytest.fixture
def edge_runtime() -> CommandRunner:
    """Runs `python -m edge_runtime ARGS` as a user would, from the repository; `env` adds or replaces variables."""

    def run(
        *args: str | Path, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        environ = {name: value for name, value in os.environ.items() if name not in SERVICE_VARIABLES}
        command = [sys.executable, "-m", "edge_runtime", *map(str, args)]
        return subprocess.run(
            command, cwd=REPO, env=environ | (env or {}), capture_output=True, text=True, timeout=timeout, check=False
        )

    return run
