"""Which Keras models XNNPACK's sparse inference can speed up, and the kernels worth zeroing for it.

Zeroed weights make no CPU backend faster except one: XNNPACK (LiteRT's CPU delegate) rewrites a float32
graph to sparse kernels when it is shaped like a MobileNet: a first 3x3 stride-2 convolution on 3 input
channels, then 1x1 convolutions (the sparse ones), depthwise 3x3 or 5x5 convolutions, additions and
multiplications, ReLU-style activations, ending in global average pooling; anything after the pooling
(the classifier) runs dense. Only the 1x1 convolutions run sparse, and they pay off from about two thirds
zeros, so `--prune-scope xnnpack` zeroes only those, at least 70% of each, after checking the graph
qualifies, and names the first layer that does not. XNNPACK's sparse microkernels target ARM and SSE, so
x86 CPUs with AVX may keep the dense path: measure the `tflite/sparse_fp32` variant on the box's CPU.
"""

from __future__ import annotations

from typing import Any

from converters.errors import ConversionError

__all__ = ["MIN_SPARSITY", "check_xnnpack_graph", "first_unqualified_layer", "pointwise_kernels"]

MIN_SPARSITY = 0.7
PASS_THROUGH = frozenset(
    {"InputLayer", "BatchNormalization", "ReLU", "Add", "Multiply", "ZeroPadding2D", "Dropout", "Rescaling"}
)
ACTIVATIONS = frozenset({"linear", "relu", "relu6", "sigmoid", "hard_sigmoid", "hard_swish", "hard_silu", "swish"})


def check_xnnpack_graph(model: Any, target: float) -> None:
    if target < MIN_SPARSITY:
        raise ConversionError(
            f"--prune-scope xnnpack zeroes 1x1 convolutions for XNNPACK's sparse kernels, which pay off from about "
            f"{MIN_SPARSITY:.0%} zeros; give --prune {MIN_SPARSITY:g} or more (got {target:g})"
        )
    problem = first_unqualified_layer(model)
    if problem is not None:
        raise ConversionError(
            f"--prune-scope xnnpack: XNNPACK's sparse inference cannot run this model: {problem}; zeroed weights "
            "would make none of its variants faster"
        )
    if not pointwise_kernels(model):
        raise ConversionError("--prune-scope xnnpack: the model has no 1x1 convolution to make sparse")


def first_unqualified_layer(model: Any) -> str | None:
    """Why the layers up to the global average pooling cannot all run on XNNPACK's sparse path, or None."""
    from converters.pruning import leaf_layers

    first_convolution = True
    for layer in leaf_layers(model):
        kind = type(layer).__name__
        if kind == "GlobalAveragePooling2D":
            return None
        if kind in PASS_THROUGH:
            continue
        if kind == "Activation" or kind in ("Conv2D", "DepthwiseConv2D"):
            activation = getattr(getattr(layer, "activation", None), "__name__", "linear")
            if activation not in ACTIVATIONS:
                return f"layer {layer.name} uses the activation {activation}"
        if kind == "Activation":
            continue
        if kind == "Conv2D":
            reason = _conv_reason(layer, first_convolution)
            first_convolution = False
            if reason is not None:
                return f"layer {layer.name} ({kind}) {reason}"
            continue
        if kind == "DepthwiseConv2D":
            if tuple(layer.kernel_size) not in ((3, 3), (5, 5)) or tuple(layer.strides) not in ((1, 1), (2, 2)):
                return f"layer {layer.name} (DepthwiseConv2D) is not 3x3 or 5x5 with stride 1 or 2"
            continue
        return f"layer {layer.name} ({kind}) has no sparse kernel"
    return "its convolutions do not end in GlobalAveragePooling2D, where the sparse subgraph must end"


def _conv_reason(layer: Any, first: bool) -> str | None:
    kernel, strides = tuple(layer.kernel_size), tuple(layer.strides)
    if getattr(layer, "groups", 1) != 1 or tuple(layer.dilation_rate) != (1, 1):
        return "is grouped or dilated"
    if kernel == (1, 1) and strides == (1, 1):
        return None
    if first and kernel == (3, 3) and strides == (2, 2) and int(layer.kernel.shape[2]) == 3:
        return None
    return "is neither 1x1 with stride 1 nor the first 3x3 stride-2 convolution on 3 channels"


def pointwise_kernels(model: Any) -> list[tuple[str, Any]]:
    """(layer name, kernel variable) of the 1x1 stride-1 Conv2D layers: the ones XNNPACK runs sparse."""
    from converters.pruning import leaf_layers

    return [
        (f"{layer.name}/{layer.kernel.name}", layer.kernel)
        for layer in leaf_layers(model)
        if type(layer).__name__ == "Conv2D" and tuple(layer.kernel_size) == (1, 1) and tuple(layer.strides) == (1, 1)
    ]
