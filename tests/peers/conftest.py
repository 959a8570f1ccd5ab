"""Peer tests: edge_runtime against other projects' own code, in their own environment (`make test-peers`).

They need packages the main suite's environment does not have (Ultralytics, with PyTorch and torchvision;
roboflow's `trackers`), so `make test-peers` runs them from `.venv-peers`, and `make test` leaves this folder
out (`tests/conftest.py`). The tracking peers reuse the scenes and metrics of tests/tracking. Ultralytics
runs offline here: no checks for updates, no automatic pip installs (everything its exporters want is
installed beforehand), no fonts fetched, and its settings kept in a temporary folder instead of the user's.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tracking"))

from shapes import IMGSZ, write_dataset

EPOCHS = 30
TRAIN_IMAGES = 64


@pytest.fixture(scope="session")
def ultralytics(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The `ultralytics` package, imported offline: the variables are read when it is imported."""
    config = tmp_path_factory.mktemp("ultralytics_config")
    os.environ.update(
        YOLO_OFFLINE="1",  # its is_online() answers False without asking DNS: no hub, no events, no update checks
        YOLO_AUTOINSTALL="0",  # check_requirements() reports a missing package instead of pip-installing it
        YOLO_CONFIG_DIR=str(config),  # settings.json and fonts
        YOLO_VERBOSE="0",
    )
    import matplotlib

    # Reading a data set checks for Arial.ttf in the settings folder and downloads it when missing; plots are off,
    # so any TrueType font will do.
    (config / "Ultralytics").mkdir()
    shutil.copy(
        Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf", config / "Ultralytics" / "Arial.ttf"
    )
    import ultralytics

    folders = {key: str(config / key.removesuffix("_dir")) for key in ("datasets_dir", "weights_dir", "runs_dir")}
    loggers = dict.fromkeys(("clearml", "comet", "dvc", "mlflow", "raytune", "tensorboard", "wandb"), False)
    ultralytics.settings.update({"sync": False, **folders, **loggers})
    return ultralytics


@pytest.fixture(scope="session")
def yolo_exports(ultralytics: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A YOLOv8n built from Ultralytics' `yolov8n.yaml` (no weights downloaded), trained briefly on coloured shapes
    on photographs, and exported by Ultralytics itself: {"onnx": the .onnx file, "openvino": the IR's .xml}."""
    root = tmp_path_factory.mktemp("yolo")
    data = write_dataset(root / "data", images=TRAIN_IMAGES, size=IMGSZ)
    model = ultralytics.YOLO("yolov8n.yaml")
    model.train(
        data=str(data),
        imgsz=IMGSZ,
        epochs=EPOCHS,
        batch=16,
        workers=2,
        device="cpu",
        seed=0,
        deterministic=True,
        val=False,
        plots=False,
        project=str(root / "runs"),
        name="train",
        exist_ok=True,
        verbose=False,
    )
    best = root / "runs" / "train" / "weights" / "best.pt"
    assert best.is_file()
    onnx = Path(ultralytics.YOLO(best).export(format="onnx", imgsz=IMGSZ, device="cpu"))
    openvino = Path(ultralytics.YOLO(best).export(format="openvino", imgsz=IMGSZ, device="cpu"))
    return {"onnx": onnx, "openvino": next(openvino.glob("*.xml"))}
