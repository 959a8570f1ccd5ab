"""Magnitude pruning: which weights are zeroed, globally or per layer, and the errors for unusable requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from converters.errors import ConversionError
from converters.pruning import (
    PruneOptions,
    check_prune_options,
    magnitude_masks,
    prunable_kernels,
    prune_source,
    read_train_data,
)
from converters.sources import SourceKind, SourceModel, detect_source


def _model(seed: int = 0) -> Any:
    from tensorflow import keras

    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((6, 6, 2)),
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.BatchNormalization(),
            keras.layers.Flatten(),
            keras.layers.Dense(5),
        ]
    )


def test_global_masks_zero_the_smallest_weights_over_all_layers() -> None:
    small = np.array([[0.1, -0.2], [0.3, -0.05]], np.float32)
    large = np.array([[1.0, -2.0], [0.15, 4.0]], np.float32)
    masks = magnitude_masks([small, large], 0.5, "global")
    np.testing.assert_array_equal(masks[0], [[0, 0], [1, 0]])
    np.testing.assert_array_equal(masks[1], [[1, 1], [0, 1]])
    per_layer = magnitude_masks([small, large], 0.5, "per-layer")
    np.testing.assert_array_equal(per_layer[0], [[0, 1], [1, 0]])
    np.testing.assert_array_equal(per_layer[1], [[0, 1], [0, 1]])
    assert [m.dtype for m in masks] == [np.float32, np.float32]


def test_ties_still_give_exactly_the_target_share() -> None:
    weights = np.zeros((10, 10), np.float32)
    mask = magnitude_masks([weights], 0.3, "global")[0]
    assert int((mask == 0).sum()) == 30


@pytest.mark.parametrize("scope", ["global", "per-layer"])
def test_prune_source_zeros_only_kernels_and_reports_each_layer(tmp_path: Path, scope: str) -> None:
    _model().save(tmp_path / "small.keras")
    pruned, summary = prune_source(detect_source(tmp_path / "small.keras"), PruneOptions(0.6, scope), tmp_path)
    assert pruned.kind is SourceKind.KERAS and pruned.path.exists() and pruned.path != tmp_path / "small.keras"
    assert [layer.weights for layer in summary.layers] == [3 * 3 * 2 * 4, 64 * 5]
    assert summary.overall == pytest.approx(0.6, abs=0.005)
    if scope == "per-layer":
        assert all(layer.sparsity == pytest.approx(0.6, abs=0.01) for layer in summary.layers)
    from tensorflow import keras

    reloaded = keras.models.load_model(pruned.path)
    kernels = prunable_kernels(reloaded)
    assert [name.split("/")[-1] for name, _ in kernels] == ["kernel", "kernel"]
    zeros = sum(int(np.size(v.numpy()) - np.count_nonzero(v.numpy())) for _, v in kernels)
    assert zeros == sum(layer.zeros for layer in summary.layers)
    gamma = reloaded.layers[1].gamma.numpy()
    assert np.all(gamma == 1.0)  # normalisation parameters are not pruned


def test_fine_tuning_keeps_the_pruned_weights_at_zero(tmp_path: Path) -> None:
    _model(1).save(tmp_path / "small.keras")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "train.npz", x=rng.normal(size=(64, 6, 6, 2)).astype(np.float32), y=rng.integers(0, 5, 64))
    options = PruneOptions(0.5, "global", tmp_path / "train.npz", epochs=2, learning_rate=1e-2)
    (tmp_path / "unpruned").mkdir()
    before = prune_source(detect_source(tmp_path / "small.keras"), PruneOptions(0.5), tmp_path / "unpruned")[1]
    summary = prune_source(detect_source(tmp_path / "small.keras"), options, tmp_path)[1]
    assert summary.epochs == 2 and summary.train_samples == 64 and summary.final_loss is not None
    assert [layer.zeros for layer in summary.layers] == [layer.zeros for layer in before.layers]


def test_bad_requests_are_conversion_errors(tmp_path: Path, tiny_onnx: Path) -> None:
    with pytest.raises(ConversionError, match="between 0 and 1"):
        check_prune_options(PruneOptions(1.5))
    with pytest.raises(ConversionError, match="--prune-scope"):
        check_prune_options(PruneOptions(0.5, "per-channel"))
    with pytest.raises(ConversionError, match="needs --train-data"):
        check_prune_options(PruneOptions(0.5, epochs=3))
    with pytest.raises(ConversionError, match=r"measured 1\.0x on CPUs .*use --prune-channels"):
        prune_source(detect_source(tiny_onnx), PruneOptions(0.5), tmp_path)
    tflite = Path(__file__).resolve().parents[2] / "samples/models/face_detection_short_range/tflite/fp32/model.tflite"
    with pytest.raises(ConversionError, match=r"needs a Keras \.keras model"):
        prune_source(detect_source(tflite), PruneOptions(0.5), tmp_path)
    model = _model()
    np.savez(tmp_path / "wrong.npz", x=np.zeros((4, 8, 8, 2), np.float32), y=np.zeros(4))
    with pytest.raises(ConversionError, match=r"x has shape \[4, 8, 8, 2\], the model takes \(N, 6, 6, 2\)"):
        read_train_data(tmp_path / "wrong.npz", model)
    np.savez(tmp_path / "noy.npz", x=np.zeros((4, 6, 6, 2), np.float32))
    with pytest.raises(ConversionError, match="needs arrays 'x' and 'y'"):
        read_train_data(tmp_path / "noy.npz", model)
    np.savez(tmp_path / "float_y.npz", x=np.zeros((4, 6, 6, 2), np.float32), y=np.full(4, 0.5))
    with pytest.raises(ConversionError, match="integer class index"):
        read_train_data(tmp_path / "float_y.npz", model)
    no_kernels = tmp_path / "empty.keras"
    from tensorflow import keras

    keras.Sequential([keras.Input((3,)), keras.layers.ReLU()]).save(no_kernels)
    with pytest.raises(ConversionError, match="no Dense or convolution kernels"):
        prune_source(SourceModel(no_kernels, SourceKind.KERAS), PruneOptions(0.5), tmp_path)


def test_report_states_the_sparsity_reached_per_layer(tmp_path: Path) -> None:
    from converters.context import QuantizationSettings
    from converters.pruning import LayerSparsity, PruningSummary
    from converters.report import ConversionReport, markdown

    pruning = PruningSummary(
        0.5, "global", (LayerSparsity("conv/kernel", 100, 20), LayerSparsity("dense/kernel", 300, 190)), epochs=2
    )
    from edge_runtime.package.manifest import MeasuredOn

    machine = MeasuredOn(cpu="AMD EPYC", int8_features=("x86_64", "avx2"))
    report = ConversionReport(
        "demo", "keras model demo.keras", "ref", "x", "none", QuantizationSettings(), machine, 1.0, 0
    )
    report.pruning = pruning
    text = markdown(report)
    assert "reached 52.5% overall" in text
    assert "| `conv/kernel` | 100 | 20 | 20.0 |" in text and "| `dense/kernel` | 300 | 190 | 63.3 |" in text
    assert "Fine-tuned 2 epochs" in text
    data = report.to_dict()["pruning"]
    assert data["overall_sparsity"] == pytest.approx(0.525) and data["layers"][1]["sparsity"] == pytest.approx(
        190 / 300
    )


def test_pruning_a_non_keras_source_stops_before_the_output_folder_is_touched(tiny_onnx: Path, tmp_path: Path) -> None:
    from converters.pipeline import ConvertOptions, convert

    options = ConvertOptions(model=tiny_onnx, out_dir=tmp_path / "out", prune=PruneOptions(0.5), bench_seconds=0)
    with pytest.raises(ConversionError, match=r"--prune on onnx model .*use --prune-channels"):
        convert(options)
    assert not (tmp_path / "out").exists()
