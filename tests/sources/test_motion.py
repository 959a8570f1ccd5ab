"""The motion gate on real frames: what passes and what is held back."""

from __future__ import annotations

import numpy as np

from edge_runtime.sources.configs import MotionGate
from edge_runtime.sources.motion import MotionDetector


def view(photo: np.ndarray, x: int, y: int) -> np.ndarray:
    return np.ascontiguousarray(photo[y : y + 400, x : x + 400])


def test_first_frame_passes_and_a_still_scene_does_not(astronaut_bgr: np.ndarray) -> None:
    detector = MotionDetector(MotionGate(keepalive_s=None))
    frame = view(astronaut_bgr, 50, 50)
    assert detector.passes(frame, 0.0)
    assert not any(detector.passes(frame.copy(), t / 10) for t in range(1, 30))
    assert detector.changed_fraction == 0.0


def test_a_moving_scene_passes(astronaut_bgr: np.ndarray) -> None:
    detector = MotionDetector(MotionGate(keepalive_s=None))
    assert detector.passes(view(astronaut_bgr, 0, 0), 0.0)
    assert all(detector.passes(view(astronaut_bgr, 8 * step, 0), step / 10) for step in range(1, 10))


def test_a_change_smaller_than_min_area_is_ignored(astronaut_bgr: np.ndarray) -> None:
    detector = MotionDetector(MotionGate(min_area=0.05, keepalive_s=None))
    frame = view(astronaut_bgr, 50, 50)
    detector.passes(frame, 0.0)
    small = frame.copy()
    small[:40, :40] = 255 - small[:40, :40]  # 1 % of the picture
    assert not detector.passes(small, 0.1)
    assert 0 < detector.changed_fraction < 0.05
    large = frame.copy()
    large[:200, :200] = 255 - large[:200, :200]  # 25 %
    assert detector.passes(large, 0.2)


def test_keepalive_lets_one_still_frame_through_per_interval(astronaut_bgr: np.ndarray) -> None:
    detector = MotionDetector(MotionGate(keepalive_s=1.0))
    frame = view(astronaut_bgr, 50, 50)
    passed = [t / 10 for t in range(35) if detector.passes(frame, t / 10)]
    assert passed == [0.0, 1.0, 2.0, 3.0]
