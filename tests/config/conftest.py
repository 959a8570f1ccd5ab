"""Config files written to a temporary directory, pointing at the real bundled face detector package."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ConfigWriter = Callable[[Any], Path]


def dump(data: Any) -> str:
    """YAML of `data`; a string value "!credential NAME" is written as the tag, the way an admin writes it."""
    text = yaml.dump(data, sort_keys=False)
    return re.sub(r"'(!credential [^']+)'", r"\1", text)


@pytest.fixture
def base_config(face_package_dir: Path) -> dict[str, Any]:
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
