"""Each label's number, and the score rules of its object filter, as the tracker's per-frame arrays use them.

Labels are numbered on first sight, so that a frame's labels become one integer array and "same label"
one comparison. A label's `threshold` and `min_score` are looked up by number; when every label seen has
the same (no label has a filter of its own, the usual case), they are one number instead, and comparing
with it spares gathering a value per track or detection every frame.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from edge_runtime.tracking.filters import DetectionFilter

__all__ = ["LabelRules"]

Array = npt.NDArray[np.float64]
Codes = npt.NDArray[np.int64]
Indices = npt.NDArray[np.intp]


class LabelRules:
    """The labels a tracker has seen, by number, with their filters' score rules."""

    def __init__(self, detection_filter: DetectionFilter) -> None:
        self._filter = detection_filter
        self.labels: list[str] = []  # label code -> label
        self._codes: dict[str, int] = {}
        self._thresholds = np.zeros(0)  # per label code
        self._min_scores = np.zeros(0)  # per label code
        self._shared_threshold = self._shared_min_score = np.nan  # NaN: the labels' values differ

    def codes(self, labels: Sequence[str]) -> Codes:
        """The number of each label, numbering those seen for the first time."""
        try:
            return np.fromiter(map(self._codes.__getitem__, labels), np.int64, len(labels))
        except KeyError:  # a label's first sight
            return np.array([self._code(label) for label in labels], dtype=np.int64)

    def names(self, codes: Codes) -> npt.NDArray[np.object_]:
        """The labels of these numbers."""
        return np.array([self.labels[code] for code in codes.tolist()], dtype=object)

    def threshold_of(self, codes: Codes) -> Array | float:
        """The `threshold` of each label code: one number when every label has the same."""
        shared = self._shared_threshold
        return self._thresholds[codes] if shared != shared else shared

    def min_score_of(self, codes: Codes, rows: Indices | slice) -> Array | float:
        """The `min_score` of each of the detections at `rows`: one number when every label has the same."""
        shared = self._shared_min_score
        return self._min_scores[codes[rows]] if shared != shared else shared

    def _code(self, label: str) -> int:
        code = self._codes.get(label)
        if code is None:
            code = self._codes[label] = len(self.labels)
            self.labels.append(label)
            rule = self._filter.filter_for(label)
            self._thresholds = np.append(self._thresholds, rule.threshold)
            self._min_scores = np.append(self._min_scores, rule.min_score)
            self._shared_threshold = _shared(self._thresholds)
            self._shared_min_score = _shared(self._min_scores)
        return code


def _shared(values: Array) -> float:
    """The one value in `values`, or NaN when they are not all the same."""
    first = float(values[0])
    return first if bool(np.all(values == first)) else np.nan
