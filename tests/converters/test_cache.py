"""The conversion cache with the real converter: a second conversion of the same model and data reuses the
reference's outputs and every int8 quantization, and anything that differs, or an entry that does not read,
is computed again."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import numpy as np
import pytest
from recovery_models import convert_int8, write_models

from converters.cache import BuildCache, ConversionCache, default_cache_dir, samples_digest
from converters.cli import build_parser, options_from
from converters.metrics import RunOutputs
from converters.report import ConversionReport
from edge_runtime.package.loader import open_package, sha256_of

FROM_CACHE = "openvino/int8: the same quantization from the cache"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_models(tmp_path_factory.mktemp("cache_models"))


@pytest.fixture(scope="module")
def first(models: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, ConversionReport]:
    """The outlier model converted once with an empty cache: the cache folder, the package and its report."""
    folder = tmp_path_factory.mktemp("first_conversion")
    return folder / "cache", folder / "out", convert_int8(models, "outlier", folder / "out", cache_dir=folder / "cache")


def _entries(cache: Path) -> set[str]:
    return {p.name for p in cache.iterdir() if not p.name.startswith(".")}


def test_a_second_conversion_reuses_the_reference_and_every_quantization(
    models: Path, first: tuple[Path, Path, ConversionReport], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache, first_out, first_report = first
    entries = _entries(cache)
    # The reference, the first quantization and recovery's three attempts, the last with accuracy control.
    assert len([e for e in entries if e.startswith("reference-")]) == 1
    assert len([e for e in entries if e.startswith("build-")]) >= 4
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    with caplog.at_level(logging.INFO, logger="converters"):
        second = convert_int8(models, "outlier", tmp_path / "second", cache_dir=cache).variants[0]
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count(FROM_CACHE) == 4 and any("reference outputs from the cache" in m for m in messages)
    assert _entries(cache) == entries
    assert [(a.name, a.status, a.drop_points) for a in second.attempts] == [
        (a.name, a.status, a.drop_points) for a in first_report.variants[0].attempts
    ]
    files = [f.path for f in open_package(tmp_path / "second").manifest.variants["openvino/int8"].files]
    assert [sha256_of(tmp_path / "second" / f) for f in files] == [sha256_of(first_out / f) for f in files]


def test_another_threshold_reuses_the_plain_quantizations_and_controls_again(
    models: Path, first: tuple[Path, Path, ConversionReport], tmp_path: Path
) -> None:
    cache = first[0]
    before = _entries(cache)
    result = convert_int8(models, "outlier", tmp_path / "second", 0.5, cache_dir=cache).variants[0]
    added = _entries(cache) - before
    assert len(added) == 1 and next(iter(added)).startswith("build-")  # accuracy control held to 0.5 instead of 1
    assert result.attempts[-1].name == "accuracy control"


def test_other_samples_are_another_key(models: Path) -> None:
    samples = [[a[None]] for a in np.load(models / "calibration.npy")]
    changed = [[s[0].copy()] for s in samples]
    changed[-1][0][0, 0] += 1e-6
    assert samples_digest(samples) == samples_digest([[s[0].copy()] for s in samples])
    assert samples_digest(samples) != samples_digest(changed)
    assert samples_digest(samples) != samples_digest([[s[0].astype(np.float64)] for s in samples])


def test_an_entry_that_does_not_read_is_built_again_and_never_escapes_its_folder(tmp_path: Path) -> None:
    store = ConversionCache(tmp_path / "cache")
    builds = BuildCache(store, "0" * 64)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "m.xml").write_text("<net/>")
    store.keep_files("build-a", tmp_path / "model", ["m.xml"], ["a note"])
    assert builds.restore("build-a", tmp_path / "out") == (("m.xml",), ("a note",))
    assert (tmp_path / "out" / "m.xml").read_text() == "<net/>"
    hostile = tmp_path / "cache" / "build-b"
    hostile.mkdir()
    (hostile / "entry.json").write_text(json.dumps({"files": ["../../outside.xml"], "notes": []}))
    assert builds.restore("build-b", tmp_path / "deep" / "out") is None
    assert not (tmp_path / "outside.xml").exists()
    (hostile / "entry.json").write_text("{not json")
    assert builds.restore("build-b", tmp_path / "out") is None
    assert builds.restore("build-missing", tmp_path / "out") is None


def test_the_cache_folder_follows_xdg_and_the_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "edge-convert"
    parse = build_parser().parse_args
    assert options_from(parse(["m.onnx", "-o", "out"])).cache_dir == tmp_path / "edge-convert"
    assert options_from(parse(["m.onnx", "-o", "out", "--cache-dir", "elsewhere"])).cache_dir == Path("elsewhere")
    assert options_from(parse(["m.onnx", "-o", "out", "--no-cache"])).cache_dir is None
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path("~").expanduser() / ".cache" / "edge-convert"


def test_the_reference_comes_back_with_the_warnings_running_it_gave(tmp_path: Path) -> None:
    store = ConversionCache(tmp_path / "cache")
    outputs = RunOutputs(["landmarks", "score"], [np.arange(12.0).reshape(3, 4), np.array([[0.5], [0.25], [1.0]])])
    runs: list[int] = []

    def run() -> tuple[RunOutputs, str, list[str]]:
        runs.append(1)
        return outputs, "model.tflite on openvino:CPU at fp32", ["litert is missing: OpenVINO ran the reference"]

    first = store.reference("reference-a", run)
    again = store.reference("reference-a", run)
    assert runs == [1]
    assert (
        again[1:]
        == first[1:]
        == ("model.tflite on openvino:CPU at fp32", ["litert is missing: OpenVINO ran the reference"])
    )
    assert again[0].names == ["landmarks", "score"]
    assert all(np.array_equal(a, b) for a, b in zip(again[0].arrays, outputs.arrays, strict=True))
