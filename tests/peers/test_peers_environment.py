"""The peers environment imports the OpenCV the runtime declares.

Ultralytics and `trackers` require opencv-python, the desktop build, beside the runtime's
opencv-python-headless; both wheels write the same `cv2` folder, and the Makefile writes the headless one
last. Were the desktop build the one imported, the peer tests would run the runtime on another OpenCV
than it ships with, and on a machine without the system's libGL `import cv2` would fail outright.
"""

from __future__ import annotations

from importlib.metadata import version

import cv2
import numpy as np


def test_cv2_is_the_headless_build_of_the_declared_version() -> None:
    gui = [line.split(":", 1)[1].strip() for line in cv2.getBuildInformation().splitlines() if "GUI:" in line]
    assert gui == ["NONE"]
    assert cv2.__version__ == version("opencv-python-headless").rsplit(".", 1)[0]


def test_cv2_encodes_and_decodes_an_image() -> None:
    image = np.zeros((48, 64, 3), dtype=np.uint8)
    cv2.rectangle(image, (8, 8), (40, 30), (0, 200, 255), thickness=-1)
    encoded, data = cv2.imencode(".png", image)
    assert encoded
    assert np.array_equal(cv2.imdecode(data, cv2.IMREAD_COLOR), image)
