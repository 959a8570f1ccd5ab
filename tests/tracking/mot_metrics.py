"""CLEAR-MOT (MOTA, identity switches) and IDF1, small enough to read in one go.

Definitions as in Bernardin & Stiefelhagen 2008 (CLEAR) and Ristani et al. 2016 (IDF1), with the
matching rules py-motmetrics and TrackEval use:

- A ground-truth object and a hypothesis may match in a frame when their boxes overlap by IoU >= 0.5.
- CLEAR, frame by frame: a pair matched in the object's previous match is kept while it still overlaps
  enough; the rest are paired by minimum total (1 - IoU). A ground-truth object matched to a different
  hypothesis than at its previous match is an identity switch. MOTA = 1 - (misses + false positives +
  switches) / ground-truth boxes.
- IDF1: each ground-truth trajectory is paired with at most one hypothesis trajectory for the whole
  sequence, maximising the frames in which the pair overlaps enough (IDTP);
  IDF1 = 2 IDTP / (ground-truth boxes + hypothesis boxes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import lap
import numpy as np

from edge_runtime.tracking.association import iou_matrix

Box = tuple[float, float, float, float]
MIN_IOU = 0.5


@dataclass(frozen=True)
class MotResult:
    ground_truth: int  # boxes
    hypotheses: int  # boxes
    matches: int
    misses: int
    false_positives: int
    id_switches: int
    idtp: int

    @property
    def mota(self) -> float:
        return 1.0 - (self.misses + self.false_positives + self.id_switches) / self.ground_truth

    @property
    def idf1(self) -> float:
        return 2 * self.idtp / (self.ground_truth + self.hypotheses)

    @property
    def switches_per_1000(self) -> float:
        """Identity switches per 1000 ground-truth boxes (object-frames)."""
        return 1000 * self.id_switches / self.ground_truth


def evaluate(frames: Iterable[tuple[Mapping[int, Box], Mapping[str, Box]]]) -> MotResult:
    """Each frame: ground truth {object id: box} and the tracker's output {track id: box}."""
    previous: dict[int, str] = {}  # ground-truth id -> hypothesis id at its latest match
    pair_frames: Counter[tuple[int, str]] = Counter()
    ground_truth = hypotheses = matched_total = switches = 0
    for truth, hypothesis in frames:
        truth_ids, hypothesis_ids = list(truth), list(hypothesis)
        ground_truth += len(truth_ids)
        hypotheses += len(hypothesis_ids)
        overlap = iou_matrix(
            np.array([truth[i] for i in truth_ids], dtype=np.float64).reshape(-1, 4),
            np.array([hypothesis[h] for h in hypothesis_ids], dtype=np.float64).reshape(-1, 4),
        )
        for row, column in zip(*np.nonzero(overlap >= MIN_IOU), strict=True):
            pair_frames[truth_ids[row], hypothesis_ids[column]] += 1

        matched: dict[int, int] = {}  # row -> column
        column_of = {h: c for c, h in enumerate(hypothesis_ids)}
        for row, truth_id in enumerate(truth_ids):
            kept = column_of.get(previous.get(truth_id, ""))
            if kept is not None and overlap[row, kept] >= MIN_IOU and kept not in matched.values():
                matched[row] = kept
        free_rows = [r for r in range(len(truth_ids)) if r not in matched]
        free_columns = [c for c in range(len(hypothesis_ids)) if c not in matched.values()]
        if free_rows and free_columns:
            cost = 1.0 - overlap[np.ix_(free_rows, free_columns)]
            cost[cost > 1.0 - MIN_IOU] = 1e6
            _, row_to_column, _ = lap.lapjv(cost, extend_cost=True, cost_limit=1.0 - MIN_IOU + 1e-9)
            for index, column in enumerate(row_to_column):
                if column >= 0 and cost[index, column] <= 1.0 - MIN_IOU:
                    matched[free_rows[index]] = free_columns[column]
        for row, column in matched.items():
            truth_id, hypothesis_id = truth_ids[row], hypothesis_ids[column]
            if truth_id in previous and previous[truth_id] != hypothesis_id:
                switches += 1
            previous[truth_id] = hypothesis_id
        matched_total += len(matched)

    return MotResult(
        ground_truth=ground_truth,
        hypotheses=hypotheses,
        matches=matched_total,
        misses=ground_truth - matched_total,
        false_positives=hypotheses - matched_total,
        id_switches=switches,
        idtp=_best_identity_pairing(pair_frames),
    )


def _best_identity_pairing(pair_frames: Mapping[tuple[int, str], int]) -> int:
    if not pair_frames:
        return 0
    truth_ids = sorted({t for t, _ in pair_frames})
    hypothesis_ids = sorted({h for _, h in pair_frames})
    rows = {t: i for i, t in enumerate(truth_ids)}
    columns = {h: i for i, h in enumerate(hypothesis_ids)}
    gain = np.zeros((len(truth_ids), len(hypothesis_ids)))
    for (truth_id, hypothesis_id), count in pair_frames.items():
        gain[rows[truth_id], columns[hypothesis_id]] = count
    _, row_to_column, _ = lap.lapjv(-gain, extend_cost=True)
    return int(sum(gain[r, c] for r, c in enumerate(row_to_column) if c >= 0))
