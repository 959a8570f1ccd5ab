"""Recorded samples replayed from CSV and .npy files."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from source_media import read_all

from edge_runtime.errors import ConfigError
from edge_runtime.sources import make_source
from edge_runtime.sources.configs import ReplaySourceConfig
from edge_runtime.sources.replay import ReplaySensor


def replay(path: Path, length: int, stride: int, channels: int, **fields: object) -> ReplaySensor:
    config = ReplaySourceConfig.model_validate(
        {"type": "replay", "path": path, "window": {"length": length, "stride": stride, "channels": channels}, **fields}
    )
    source = make_source(config, "recording")
    assert isinstance(source, ReplaySensor)
    return source


def expected(samples: np.ndarray, length: int, stride: int) -> list[np.ndarray]:
    return [samples[end - length : end] for end in range(length, len(samples) + 1, stride)]


def test_csv_with_header_and_a_bad_row(tmp_path: Path) -> None:
    samples = np.arange(60, dtype=np.float32).reshape(20, 3) / 4
    lines = ["ax,ay,az"] + [",".join(f"{v:g}" for v in row) for row in samples[:10]]
    lines += ["1,2", "1,two,3", "", "1,inf,3"] + [",".join(f"{v:g}" for v in row) for row in samples[10:]]
    path = tmp_path / "accel.csv"
    path.write_text("\n".join(lines) + "\n")
    source = replay(path, length=6, stride=3, channels=3)
    source.start()
    try:
        windows = read_all(source)
    finally:
        source.close()
    wanted = expected(samples, 6, 3)
    assert len(windows) == len(wanted) == 5
    for window, samples_wanted in zip(windows, wanted, strict=True):
        np.testing.assert_array_equal(window.samples, samples_wanted)
    assert [w.index for w in windows] == list(range(5))
    assert source.stats.malformed == 3


def test_npy_loop_starts_each_pass_with_a_fresh_window(tmp_path: Path) -> None:
    samples = np.arange(10, dtype=np.int16)
    path = tmp_path / "level.npy"
    np.save(path, samples)
    source = replay(path, length=4, stride=4, channels=1, loop=True)
    source.start()
    try:
        windows = [w for w in (source.read(5.0) for _ in range(5)) if w is not None]
    finally:
        source.close()
    assert [w.samples[:, 0].tolist() for w in windows] == [[0, 1, 2, 3], [4, 5, 6, 7]] * 2 + [[0, 1, 2, 3]]


def test_rate_paces_the_samples(tmp_path: Path) -> None:
    path = tmp_path / "slow.npy"
    np.save(path, np.zeros((40, 2), dtype=np.float32))
    source = replay(path, length=10, stride=10, channels=2, rate_hz=100)
    started = time.monotonic()
    source.start()
    try:
        windows = read_all(source)
    finally:
        source.close()
    assert len(windows) == 4
    assert time.monotonic() - started > 0.3  # 40 samples at 100 Hz take 0.4 s


def test_unusable_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        replay(tmp_path / "absent.csv", 2, 1, 1).start()
    wrong_shape = tmp_path / "wrong.npy"
    np.save(wrong_shape, np.zeros((5, 4)))
    with pytest.raises(ConfigError, match="samples x 3 channels"):
        replay(wrong_shape, 2, 1, 3).start()
    not_numbers = tmp_path / "text.npy"
    np.save(not_numbers, np.array(["a", "b"]))
    with pytest.raises(ConfigError, match="expected numbers"):
        replay(not_numbers, 2, 1, 1).start()
    header_only = tmp_path / "empty.csv"
    header_only.write_text("a,b\n")
    with pytest.raises(ConfigError, match="no valid samples"):
        replay(header_only, 2, 1, 2).start()
    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(b"\x93NUMPY broken")
    with pytest.raises(ConfigError, match="cannot read"):
        replay(garbage, 2, 1, 1).start()
