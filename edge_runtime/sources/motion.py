"""Motion gating: skip inference on frames of a scene that has not changed.

A fixed camera watching an empty yard produces thousands of identical frames an hour; running a
detector on each costs power and, on small boxes, heat. Each frame is shrunk to a small grey copy,
blurred against sensor noise and compared with a running average of the previous ones, so slow
light changes fade into the average while a person walking in does not.

Which frames pass:
- the first frame, so a pipeline always has a result for the scene it starts on;
- every frame in which at least `min_area` of the picture changed by more than `threshold` grey
  levels from the average;
- one frame every `keepalive_s` seconds in a still scene (unless it is null), so the results for an
  object that stopped moving, like a parked car, are refreshed instead of going silent.
"""

from __future__ import annotations

import cv2
import numpy as np

from edge_runtime.sources.configs import MotionGate

_WORK_WIDTH = 160  # wide enough for a person at 20 m on a 90° lens, small enough to cost < 1 ms
_LEARNING_RATE = 0.2  # weight of the newest frame in the running average


class MotionDetector:
    def __init__(self, gate: MotionGate) -> None:
        self.gate = gate
        self.changed_fraction = 0.0  # of the last frame examined, for logs and tests
        self._average: np.ndarray | None = None
        self._last_passed = 0.0

    def passes(self, image: np.ndarray, now: float) -> bool:
        """Whether the frame should go to the model; `now` is in seconds on any steady clock."""
        grey = _small_grey(image)
        if self._average is None or self._average.shape != grey.shape:
            self._average = grey
            self._last_passed = now
            self.changed_fraction = 1.0
            return True
        difference = cv2.absdiff(grey, self._average)
        self.changed_fraction = float(np.count_nonzero(difference > self.gate.threshold)) / difference.size
        cv2.accumulateWeighted(grey, self._average, _LEARNING_RATE)
        keepalive = self.gate.keepalive_s
        if self.changed_fraction >= self.gate.min_area or (
            keepalive is not None and now - self._last_passed >= keepalive
        ):
            self._last_passed = now
            return True
        return False


def _small_grey(image: np.ndarray) -> np.ndarray:
    height, width = image.shape[:2]
    size = (_WORK_WIDTH, max(1, round(height * _WORK_WIDTH / width)))
    small = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    grey = cv2.cvtColor(small, cv2.COLOR_BGR2GRAY) if small.ndim == 3 else small
    blurred = cv2.GaussianBlur(grey, (5, 5), 0)
    return np.asarray(blurred, dtype=np.float32)
