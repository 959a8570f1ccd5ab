"""Sliding windows over sample streams, however the samples are chunked."""

from __future__ import annotations

import numpy as np
import pytest

from edge_runtime.sources.configs import WindowSpec
from edge_runtime.sources.windowing import Windower


def reference(samples: np.ndarray, length: int, stride: int) -> list[np.ndarray]:
    return [samples[end - length : end] for end in range(length, len(samples) + 1, stride)]


@pytest.mark.parametrize(("length", "stride", "channels"), [(4, 2, 3), (5, 5, 1), (6, 1, 2)])
@pytest.mark.parametrize("chunk", [1, 3, 7, 100])
def test_windows_match_slicing_the_whole_stream(
    length: int, stride: int, channels: int, chunk: int, rng: np.random.Generator
) -> None:
    samples = rng.normal(size=(41, channels)).astype(np.float32)
    windower = Windower(WindowSpec(length=length, stride=stride, channels=channels))
    windows = [w for begin in range(0, len(samples), chunk) for w in windower.push(samples[begin : begin + chunk])]
    expected = reference(samples, length, stride)
    assert len(windows) == len(expected)
    for window, wanted in zip(windows, expected, strict=True):
        assert window.shape == (length, channels) and window.dtype == np.float32
        np.testing.assert_array_equal(window, wanted)


def test_first_window_needs_length_samples_then_one_per_stride() -> None:
    windower = Windower(WindowSpec(length=4, stride=2, channels=1))
    assert windower.push(np.arange(3.0)) == []
    [first] = windower.push(np.array([3.0]))
    np.testing.assert_array_equal(first[:, 0], [0, 1, 2, 3])
    assert windower.push(np.array([4.0])) == []
    [second] = windower.push(np.array([5.0]))
    np.testing.assert_array_equal(second[:, 0], [2, 3, 4, 5])


def test_windows_do_not_share_memory_with_later_pushes() -> None:
    windower = Windower(WindowSpec(length=2, stride=1, channels=1))
    first = windower.push(np.array([1.0, 2.0]))[0]
    windower.push(np.array([3.0, 4.0, 5.0]))
    np.testing.assert_array_equal(first[:, 0], [1, 2])


def test_reset_starts_a_fresh_window() -> None:
    windower = Windower(WindowSpec(length=3, stride=3, channels=1))
    windower.push(np.array([1.0, 2.0]))
    windower.reset()
    assert windower.push(np.array([3.0, 4.0])) == []
    [window] = windower.push(np.array([5.0]))
    np.testing.assert_array_equal(window[:, 0], [3, 4, 5])
