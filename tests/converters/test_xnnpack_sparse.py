"""--prune-scope xnnpack: only 1x1 convolutions are zeroed, and only in graphs XNNPACK's sparse path can run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from converters.errors import ConversionError
from converters.pruning import PruneOptions, prune_source
from converters.sources import detect_source
from converters.xnnpack_sparse import first_unqualified_layer


def _mobilenet_shaped(first_stride: int = 2, pooling: str = "average") -> Any:
    from tensorflow import keras

    keras.utils.set_random_seed(0)
    layers = keras.layers
    inputs = keras.Input((16, 16, 3))
    x = layers.Conv2D(8, 3, strides=first_stride, padding="same", name="stem")(inputs)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    x = layers.DepthwiseConv2D(3, padding="same", name="depthwise")(x)
    x = layers.Conv2D(16, 1, activation="relu", name="pointwise")(x)
    x = layers.GlobalAveragePooling2D()(x) if pooling == "average" else layers.MaxPooling2D(name="max_pool")(x)
    outputs = layers.Dense(4, name="classifier")(layers.Flatten()(x))
    return keras.Model(inputs, outputs)


def test_only_pointwise_kernels_are_zeroed(tmp_path: Path) -> None:
    _mobilenet_shaped().save(tmp_path / "mobile.keras")
    _, summary = prune_source(detect_source(tmp_path / "mobile.keras"), PruneOptions(0.75, "xnnpack"), tmp_path)
    assert [layer.name.split("/")[0] for layer in summary.layers] == ["pointwise"]
    assert summary.layers[0].sparsity == pytest.approx(0.75, abs=1 / summary.layers[0].weights)


def test_graphs_xnnpack_cannot_run_sparse_name_the_layer(tmp_path: Path) -> None:
    assert first_unqualified_layer(_mobilenet_shaped()) is None
    assert "layer stem (Conv2D) is neither 1x1" in str(first_unqualified_layer(_mobilenet_shaped(first_stride=1)))
    assert "layer max_pool (MaxPooling2D) has no sparse kernel" in str(
        first_unqualified_layer(_mobilenet_shaped(pooling="max"))
    )
    _mobilenet_shaped(first_stride=1).save(tmp_path / "dense.keras")
    with pytest.raises(ConversionError, match="sparse inference cannot run this model: layer stem"):
        prune_source(detect_source(tmp_path / "dense.keras"), PruneOptions(0.8, "xnnpack"), tmp_path)
    _mobilenet_shaped().save(tmp_path / "mobile.keras")
    with pytest.raises(ConversionError, match=r"pay off from about 70% zeros; give --prune 0.7 or more"):
        prune_source(detect_source(tmp_path / "mobile.keras"), PruneOptions(0.5, "xnnpack"), tmp_path)
