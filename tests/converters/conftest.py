from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from annotated_faces import AnnotatedImages, write_annotated_faces
from tiny_cnn import write_factory

from converters.pipeline import ConvertOptions, convert
from converters.report import ConversionReport

TINY_LABELS = ",".join(f"class{i}" for i in range(10))


@pytest.fixture(scope="session")
def tiny_calibration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 preprocessed inputs for the tiny classifier, (N, 3, 32, 32) float32."""
    path = tmp_path_factory.mktemp("calib") / "calibration.npy"
    np.save(path, np.random.default_rng(7).normal(0.0, 1.0, (64, 3, 32, 32)).astype(np.float32))
    return path


@pytest.fixture(scope="session")
def tiny_conversion(
    tiny_onnx: Path, tiny_calibration: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[ConversionReport, Path]:
    """The tiny ONNX classifier converted to every variant this converter builds."""
    out_dir = tmp_path_factory.mktemp("tiny_package")
    options = ConvertOptions(
        model=tiny_onnx, out_dir=out_dir, labels=TINY_LABELS, calibration=tiny_calibration, bench_seconds=0.05
    )
    return convert(options), out_dir


@pytest.fixture(scope="session")
def annotated_faces(astronaut_bgr: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> AnnotatedImages:
    """Real photos with hand-drawn face boxes, and photos without faces, as a COCO-annotated folder."""
    return write_annotated_faces(astronaut_bgr, tmp_path_factory.mktemp("annotated_faces"))


@pytest.fixture
def tiny_cnn_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """`module:factory` of a tiny CNN with a residual block and a depthwise convolution (tests/converters/tiny_cnn)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return write_factory(tmp_path)


@pytest.fixture(scope="session", autouse=True)
def conversion_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`edge-convert` keeps work in the user's cache folder; the tests keep theirs in a folder of their own."""
    folder = tmp_path_factory.mktemp("xdg_cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(folder))
        yield folder / "edge-convert"
