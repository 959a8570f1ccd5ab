"""The score history's median, padded to three scores, and the table's rows kept together."""

from __future__ import annotations

import numpy as np
import pytest

from edge_runtime.tracking.tracks import (
    FEW_YOUNG_ROWS,
    HISTORY_LENGTH,
    TrackTable,
    _padded_medians,
    median_scores,
    take_rows,
)


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


def test_young_rows_one_by_one_give_what_padding_every_row_gives() -> None:
    rng = np.random.default_rng(3)
    rows = []
    for length in [1, 2, 3, 4, 9, 10, 10, 2, 5]:
        scores = rng.choice([0.0, 0.3, 0.55, 0.7, 0.9], length).tolist()  # ties and zeros, as misses give
        rows.append(scores)
    few = history(*rows)
    assert np.array_equal(median_scores(few), _padded_medians(few))
    many = history(*(rows * 3))  # more young rows than are taken one by one
    assert len(rows) * 3 > FEW_YOUNG_ROWS
    assert np.array_equal(median_scores(many), np.tile(median_scores(few), 3))


def test_the_table_keeps_its_columns_contiguous_through_select_and_extend() -> None:
    table = TrackTable.empty()
    for name in ("means", "spreads", "anchors", "last_boxes", "history"):
        wide = np.asfortranarray(np.arange(4 * np.prod(getattr(table, name).shape[1:]), dtype=float))
        setattr(table, name, np.asfortranarray(wide.reshape((4, *getattr(table, name).shape[1:]), order="F")))
    for name in ("label_codes", "hits", "serials"):
        setattr(table, name, np.arange(4))
    for name in ("start_times", "last_seen", "missed_since", "still_since", "last_scores", "top_scores"):
        setattr(table, name, np.arange(4.0))
    table.real, table.ids, table.labels = (
        np.ones(4, bool),
        np.array(list("abcd"), object),
        np.array(list("pppp"), object),
    )
    later = table.select(np.array([3, 1])).extend(table.select(np.array([True, False, True, False])))
    assert later.ids.tolist() == ["d", "b", "a", "c"]
    for name in ("means", "spreads", "anchors", "last_boxes", "history"):
        column = getattr(later, name)
        assert column.flags.f_contiguous, name
        assert np.array_equal(column, getattr(table, name)[[3, 1, 0, 2]]), name
    assert np.array_equal(take_rows(table.means, np.array([2, 0])), table.means[[2, 0]])
