"""Magnitude pruning of a Keras model before conversion, with optional fine-tuning that keeps the zeros.

The smallest-magnitude weights of the convolution and dense kernels are set to zero, either over all
kernels together (global: layers with many small weights give up more) or to the same share in each
layer (per-layer: no layer is hollowed out). Fine-tuning on labelled data recovers accuracy; a mask
re-applied after every batch keeps the pruned weights at zero, so the sparsity reported is the
sparsity shipped. Biases and normalisation parameters are left alone: they are few and sensitive.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from converters.calibration import read_training_arrays
from converters.errors import ConversionError
from converters.progress import step
from converters.sources import SourceKind, SourceModel

SCOPES = ("global", "per-layer", "xnnpack")  # xnnpack: only 1x1 convolutions (converters.xnnpack_sparse)
PRUNABLE_LAYERS = frozenset(
    {
        "Dense",
        "Conv1D",
        "Conv2D",
        "Conv3D",
        "Conv1DTranspose",
        "Conv2DTranspose",
        "Conv3DTranspose",
        "DepthwiseConv1D",
        "DepthwiseConv2D",
        "SeparableConv1D",
        "SeparableConv2D",
    }
)
KERNEL_NAMES = frozenset({"kernel", "depthwise_kernel", "pointwise_kernel"})


@dataclass(frozen=True)
class PruneOptions:
    target: float  # share of kernel weights set to zero, 0 < target < 1
    scope: str = "global"
    train_data: Path | None = None  # .npz with x (inputs) and y (class indices) for fine-tuning
    epochs: int = 0
    batch_size: int = 32
    learning_rate: float = 1e-4


@dataclass(frozen=True)
class LayerSparsity:
    name: str
    weights: int
    zeros: int

    @property
    def sparsity(self) -> float:
        return self.zeros / self.weights if self.weights else 0.0


@dataclass(frozen=True)
class PruningSummary:
    target: float
    scope: str
    layers: tuple[LayerSparsity, ...]
    epochs: int = 0
    train_samples: int = 0
    final_loss: float | None = None
    final_accuracy: float | None = None

    @property
    def overall(self) -> float:
        total = sum(layer.weights for layer in self.layers)
        return sum(layer.zeros for layer in self.layers) / total if total else 0.0


def check_prune_options(options: PruneOptions) -> None:
    if not 0.0 < options.target < 1.0:
        raise ConversionError(f"--prune is the share of weights to zero, between 0 and 1 (got {options.target:g})")
    if options.scope not in SCOPES:
        raise ConversionError(f"--prune-scope must be one of {', '.join(SCOPES)} (got {options.scope!r})")
    if options.epochs < 0:
        raise ConversionError("--epochs must be 0 or more")
    if options.epochs > 0 and options.train_data is None:
        raise ConversionError("--epochs fine-tunes the pruned model and needs --train-data x.npz (arrays x and y)")


def check_prunable(source: SourceModel) -> None:
    if source.kind is SourceKind.ONNX:
        raise ConversionError(
            f"--prune on {source.label}: zeroing weights leaves every kernel as large, measured 1.0x on CPUs "
            "(OpenVINO, ONNX Runtime); use --prune-channels SHARE, which removes channels and is faster"
        )
    if source.kind is not SourceKind.KERAS:
        raise ConversionError(
            f"--prune needs a Keras .keras model, whose layers can be pruned and trained; {source.label} is not one"
        )


def prune_source(source: SourceModel, options: PruneOptions, scratch: Path) -> tuple[SourceModel, PruningSummary]:
    """The source pruned (and fine-tuned when asked), saved as a new Keras file under `scratch`."""
    from converters.tensorflow_models import load_keras

    check_prune_options(options)
    check_prunable(source)
    model = load_keras(source.path)
    kernels = prunable_kernels(model)
    if options.scope == "xnnpack":
        from converters.xnnpack_sparse import check_xnnpack_graph, pointwise_kernels

        check_xnnpack_graph(model, options.target)
        kernels = pointwise_kernels(model)
    if not kernels:
        raise ConversionError(f"{source.path} has no Dense or convolution kernels to prune")
    step(f"pruning {options.target:.0%} of {sum(int(np.prod(v.shape)) for _, v in kernels)} weights ({options.scope})")
    scope = "per-layer" if options.scope == "xnnpack" else options.scope
    masks = magnitude_masks([np.asarray(v.numpy()) for _, v in kernels], options.target, scope)
    apply_masks(kernels, masks)
    summary = PruningSummary(options.target, options.scope, measure(kernels))
    if options.train_data is not None and options.epochs > 0:
        summary = fine_tune(model, kernels, masks, options, summary)
    pruned = scratch / f"{source.path.stem}_pruned.keras"
    model.save(str(pruned))
    return SourceModel(path=pruned, kind=SourceKind.KERAS), summary


def prunable_kernels(model: Any) -> list[tuple[str, Any]]:
    """(layer name, kernel variable) of every Dense and convolution layer, nested models included."""
    found = []
    for layer in leaf_layers(model):
        if type(layer).__name__ not in PRUNABLE_LAYERS:
            continue
        for variable in layer.trainable_weights:
            if variable.name.split("/")[-1].split(":")[0] in KERNEL_NAMES and len(variable.shape) >= 2:
                found.append((f"{layer.name}/{variable.name}", variable))
    return found


def leaf_layers(model: Any) -> list[Any]:
    leaves = []
    for layer in getattr(model, "layers", []):
        leaves += leaf_layers(layer) if getattr(layer, "layers", None) else [layer]
    return leaves


def magnitude_masks(weights: list[np.ndarray], target: float, scope: str) -> list[np.ndarray]:
    """1.0 where a weight is kept, 0.0 where it is among the `target` share of smallest magnitudes."""
    if scope == "per-layer":
        return [_smallest_zeroed(np.abs(w).reshape(-1), target).reshape(w.shape) for w in weights]
    flat = _smallest_zeroed(np.concatenate([np.abs(w).reshape(-1) for w in weights]), target)
    masks, start = [], 0
    for w in weights:
        masks.append(flat[start : start + w.size].reshape(w.shape))
        start += w.size
    return masks


def _smallest_zeroed(magnitudes: np.ndarray, target: float) -> np.ndarray:
    count = round(target * magnitudes.size)
    mask = np.ones(magnitudes.size, np.float32)
    if count > 0:
        mask[np.argpartition(magnitudes, count - 1)[:count]] = 0.0
    return mask


def apply_masks(kernels: list[tuple[str, Any]], masks: list[np.ndarray]) -> None:
    for (_, variable), mask in zip(kernels, masks, strict=True):
        variable.assign(np.asarray(variable.numpy()) * mask.astype(variable.dtype))


def measure(kernels: list[tuple[str, Any]]) -> tuple[LayerSparsity, ...]:
    """Zeros actually in each kernel now."""
    layers = []
    for name, variable in kernels:
        values = np.asarray(variable.numpy())
        layers.append(LayerSparsity(name, int(values.size), int(values.size - np.count_nonzero(values))))
    return tuple(layers)


def fine_tune(
    model: Any, kernels: list[tuple[str, Any]], masks: list[np.ndarray], options: PruneOptions, summary: PruningSummary
) -> PruningSummary:
    from tensorflow import keras

    assert options.train_data is not None
    x, y = read_train_data(options.train_data, model)
    probabilities = _outputs_probabilities(model, x[: min(len(x), 64)])

    class KeepZeros(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            apply_masks(kernels, masks)

    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=options.learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=not probabilities),
        metrics=["accuracy"],
    )
    step(f"fine-tuning the pruned model: {options.epochs} epochs on {len(x)} samples from {options.train_data}")
    history = model.fit(
        x, y, epochs=options.epochs, batch_size=options.batch_size, verbose=0, shuffle=True, callbacks=[KeepZeros()]
    )
    apply_masks(kernels, masks)
    last = {key: float(values[-1]) for key, values in history.history.items() if values}
    return PruningSummary(
        summary.target,
        summary.scope,
        measure(kernels),
        epochs=options.epochs,
        train_samples=len(x),
        final_loss=last.get("loss"),
        final_accuracy=last.get("accuracy"),
    )


def read_train_data(path: Path, model: Any) -> tuple[np.ndarray, np.ndarray]:
    """x shaped like the model's (single) input with any batch size, y one class index per sample."""
    if len(model.inputs) != 1:
        raise ConversionError("fine-tuning after pruning takes models with one input")
    x, y = read_training_arrays(path)
    expected = tuple(model.inputs[0].shape[1:])
    if x.ndim != len(expected) + 1 or any(e is not None and e != d for e, d in zip(expected, x.shape[1:], strict=True)):
        shown = ", ".join("?" if e is None else str(e) for e in expected)
        raise ConversionError(f"training data {path}: x has shape {list(x.shape)}, the model takes (N, {shown})")
    if len(y) != len(x) or not np.issubdtype(y.dtype, np.number) or not np.all(np.mod(y, 1) == 0):
        raise ConversionError(f"training data {path}: y must hold one integer class index per sample of x")
    return x.astype(np.float32), y.astype(np.int64)


def _outputs_probabilities(model: Any, x: np.ndarray) -> bool:
    """Whether the model ends in a softmax (rows of non-negative scores summing to 1), which sets the loss."""
    scores = np.asarray(model(x, training=False)).reshape(len(x), -1)
    return bool(scores.min() >= 0.0 and np.allclose(scores.sum(axis=1), 1.0, atol=1e-3))
