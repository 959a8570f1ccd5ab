from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from live_rollout import Box, live_box


@pytest.fixture
def box(face_package_dir: Path, astronaut_bgr: np.ndarray, tmp_path: Path) -> Iterator[Box]:
    with live_box(face_package_dir, astronaut_bgr, tmp_path) as running:
        yield running
