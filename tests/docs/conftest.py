"""Fixtures of the documentation tests: the site built once, the models the recipes convert, sandboxes for snippets."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "sources"))

from doc_snippets import DOCS, REPO, SAMPLES, Sandbox, command_lines, edge_convert, edge_runtime

# Every conversion runs as the recipe gives it, without the speed measurements (minutes on a small box).
NO_BENCH = ("--bench-seconds", "0")


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`mkdocs build --strict`, as `make docs` runs it, into a temporary folder."""
    site = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}{done.stderr}"
    return site


def recipe_command(page: str, starting: str) -> list[str]:
    """The one command of a page's shell blocks that starts with `starting`, as a list of arguments."""
    (line,) = command_lines(page, starting)
    return shlex.split(line)[1:]


@pytest.fixture(scope="session")
def yolo_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Ultralytics-shaped detect export converted with the recipe's own `edge-convert best.onnx -o best`."""
    from ultralytics_exports import build_ultralytics_onnx

    folder = tmp_path_factory.mktemp("yolo")
    build_ultralytics_onnx(folder / "best.onnx", imgsz=(64, 64))
    arguments = recipe_command("recipes/your-own-model.md", ".venv/bin/edge-convert best.onnx")
    edge_convert(*[folder / a if a in ("best.onnx", "best") else a for a in arguments], *NO_BENCH)
    return folder / "best"


@pytest.fixture(scope="session")
def yolo_package_as_is(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same export packaged as it is, with the recipe's own `edge-runtime package make` line, run as the box's
    root would run it; what it prints must be the summary the recipe shows, but for the folder."""
    from ultralytics_exports import build_ultralytics_onnx

    folder = tmp_path_factory.mktemp("yolo-as-is")
    build_ultralytics_onnx(folder / "best.onnx", imgsz=(64, 64))
    program, *arguments = recipe_command(
        "recipes/your-own-model.md", "sudo /opt/edge-runtime/venv/bin/edge-runtime package make"
    )
    assert program == "/opt/edge-runtime/venv/bin/edge-runtime"
    target = "/opt/edge-runtime/models/best"
    renamed = {"best.onnx": folder / "best.onnx", target: folder / "best"}
    printed = edge_runtime(*[renamed.get(a, a) for a in arguments])
    summary = printed.splitlines()[0].replace(str(folder / "best"), target)
    assert summary.split(", sha256 ")[0] in (DOCS / "recipes" / "your-own-model.md").read_text(), printed
    return folder / "best"


@pytest.fixture(scope="session")
def classifier_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small ONNX classifier converted with the recipe's own command line: labels file, calibration folder."""
    from model_builders import build_tiny_classifier_onnx

    folder = tmp_path_factory.mktemp("classifier")
    build_tiny_classifier_onnx(folder / "classifier.onnx")
    (folder / "labels.txt").write_text("\n".join(f"part-{c}" for c in "abcdefghij") + "\n")
    (folder / "calib").mkdir()
    photo = cv2.imread(str(SAMPLES / "images" / "astronaut.jpg"))
    for index in range(8):
        cv2.imwrite(str(folder / "calib" / f"{index}.jpg"), np.roll(photo, index * 40, axis=1))
    arguments = recipe_command("recipes/your-own-model.md", ".venv/bin/edge-convert classifier.onnx")
    edge_convert(*[folder / a.rstrip("/") if a in ("classifier.onnx", "my-classifier", "labels.txt", "calib/") else a
                   for a in arguments], *NO_BENCH)  # fmt: skip
    return folder / "my-classifier"


@pytest.fixture(scope="session")
def sensor_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for the pump's anomaly model, with the recipe's input shape (its score: the largest channel mean),
    converted with the recipe's own command line."""
    from model_builders import build_window_mean_onnx

    folder = tmp_path_factory.mktemp("sensor")
    build_window_mean_onnx(folder / "pump_anomaly.onnx", 128, 3)
    arguments = recipe_command("recipes/sensors.md", ".venv/bin/edge-convert pump_anomaly.onnx")
    edge_convert(*[folder / a if a in ("pump_anomaly.onnx", "pump_anomaly") else a for a in arguments],
                 *NO_BENCH)  # fmt: skip
    return folder / "pump_anomaly"


@pytest.fixture
def model_makers(request: pytest.FixtureRequest) -> dict[str, Callable[[Path, dict[str, Any]], None]]:
    """How the tests make each model package the docs name under /opt/edge-runtime/models, by folder name;
    the conversions run only when a snippet names their package."""

    def copy_of(fixture: str) -> Callable[[Path, dict[str, Any]], None]:
        return lambda path, _pipeline: shutil.copytree(request.getfixturevalue(fixture), path)

    return {
        "best": copy_of("yolo_package"),
        "my-classifier": copy_of("classifier_package"),
        "pump_anomaly": copy_of("sensor_package"),
    }


@pytest.fixture
def sandbox(tmp_path: Path, model_makers: dict[str, Callable[[Path, dict[str, Any]], None]]) -> Sandbox:
    return Sandbox(tmp_path / "root", model_makers=model_makers)
