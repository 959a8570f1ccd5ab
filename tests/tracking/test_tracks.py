"""The score history's median, padded to three scores, and the table's rows kept together."""

from __future__ import annotations

import numpy as np
import pytest

from edge_runtime.tracking.tracks import HISTORY_LENGTH, TrackTable, median_scores


def history(*rows: list[float]) -> np.ndarray:
    table = np.full((len(rows), HISTORY_LENGTH), np.nan)
    for index, scores in enumerate(rows):
        if scores:
            table[index, -len(scores) :] = scores
    return table


def test_short_histories_are_padded_with_zeros_to_three() -> None:
    medians = median_scores(history([0.9], [0.9, 0.8], [0.7, 0.0, 0.85], [0.7, 0.0, 0.85, 0.9]))
    # [0.9, 0, 0] -> 0; [0.9, 0.8, 0] -> 0.8; [0.7, 0, 0.85] -> 0.7; four scores -> (0.7 + 0.85) / 2
    assert medians.tolist() == pytest.approx([0.0, 0.8, 0.7, 0.775])


def test_a_full_history_takes_the_median_of_ten() -> None:
    scores = [0.1, 0.9, 0.2, 0.8, 0.3, 0.7, 0.4, 0.6, 0.5, 0.95]
    assert median_scores(history(scores)).tolist() == pytest.approx([float(np.median(scores))])
    assert median_scores(np.zeros((0, HISTORY_LENGTH))).shape == (0,)


def test_selecting_and_extending_keep_every_column_of_a_row_together() -> None:
    empty = TrackTable.empty()
    assert len(empty.extend(empty)) == 0

    def row_value(k: int, template: np.ndarray) -> np.ndarray:
        return np.full(template.shape[1:], k == 2 if template.dtype == bool else k, dtype=template.dtype)

    rows = TrackTable(
        **{name: np.stack([row_value(k, value) for k in (1, 2, 3)]) for name, value in vars(empty).items()}
    )
    kept = rows.select(np.array([True, False, True])).extend(rows.select(np.array([1])))
    assert len(kept) == 3
    for name, value in vars(kept).items():
        expected = [row_value(k, value)[()] if value.ndim == 1 else row_value(k, value) for k in (1, 3, 2)]
        assert all(np.array_equal(got, want) for got, want in zip(value, expected, strict=True)), name
