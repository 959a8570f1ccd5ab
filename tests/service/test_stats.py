"""Rates for the stats topic and Prometheus: right from the first report, whoever asks."""

from __future__ import annotations

import time

from edge_runtime.service.stats import RateMeter


def test_the_first_rate_counts_from_the_start_and_a_second_reader_does_not_shorten_the_window() -> None:
    meter = RateMeter(window_s=10.0)
    started = time.monotonic() - 2.0  # a pipeline that has run for 2 s and counted 20 frames
    assert 9.0 <= meter.rate("faces.in", 20, started) <= 10.0
    assert 9.0 <= meter.rate("faces.in", 20, started) <= 10.0  # asked again at once: still over the window


def test_a_restarted_pipeline_starts_its_rate_afresh() -> None:
    meter = RateMeter(window_s=10.0)
    meter.rate("faces.in", 500, time.monotonic() - 5.0)
    assert 9.0 <= meter.rate("faces.in", 10, time.monotonic() - 1.0) <= 10.0


def test_old_samples_leave_the_window() -> None:
    meter = RateMeter(window_s=0.2)
    started = time.monotonic() - 10.0
    meter.rate("faces.in", 1000, started)  # 100 per second over the first 10 s
    time.sleep(0.3)
    meter.rate("faces.in", 1000, started)  # then nothing
    time.sleep(0.3)
    assert meter.rate("faces.in", 1000, started) == 0.0
