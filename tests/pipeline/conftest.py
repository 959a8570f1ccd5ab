"""MediaPipe's real face detector, loaded once per test module, for the tests that run whole pipelines."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from edge_runtime.package.loader import open_package
from edge_runtime.placement.model import LoadedModel, load_model


@pytest.fixture(scope="module")
def face_model(face_package_dir: Path) -> Iterator[LoadedModel]:
    model = load_model(open_package(face_package_dir), "openvino/fp32", "openvino", {"precision": "fp32"})
    yield model
    model.close()
