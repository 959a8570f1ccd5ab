"""Channel importance on a network's folded weights: each layer's weights as inference computes with them.

A convolution followed by a batch normalization computes, in eval mode, one convolution whose output
channel c has weights w[c] * gamma[c] / sqrt(running_var[c] + eps); an exported ONNX graph holds exactly
those weights. Ranking channels by the norms of the raw weights instead (Torch-Pruning's
`GroupMagnitudeImportance`) depends on how the same function happens to be split between the
convolution and its normalization: a channel whose normalization scales it to almost nothing looks
important when its raw weights are large, and a network rebuilt from its ONNX export (whose split was
folded away, and re-split by `converters.onnx_modules.with_batch_norm`) is ranked differently from the
module it was exported from. Here every convolution or linear layer with a batch normalization directly
behind it is scored on its folded weights, for its own output channels and for the input-channel
slices its consumers read, and a normalization folded so is not scored separately (its scale is already
in the weights). Both sources of one network therefore remove the same channels.
"""

from __future__ import annotations

from typing import Any

import torch
import torch_pruning as tp
from torch import nn
from torch_pruning.pruner import function

__all__ = ["FoldedMagnitudeImportance", "folding_norms"]

_LAYERS = (nn.modules.conv._ConvNd, nn.Linear)


def folding_norms(graph: Any) -> dict[nn.Module, nn.modules.batchnorm._BatchNorm]:
    """Each convolution or linear layer of DepGraph `graph` whose only consumer is a batch normalization of
    its output channels, mapped to that normalization (the pairs an exporter folds into one layer)."""
    norms: dict[nn.Module, nn.modules.batchnorm._BatchNorm] = {}
    for module, node in graph.module2node.items():
        if not isinstance(module, _LAYERS) or len(node.outputs) != 1:
            continue
        norm = node.outputs[0].module
        if isinstance(norm, nn.modules.batchnorm._BatchNorm) and norm.num_features == _out_channels(module):
            norms[module] = norm
    return norms


def _out_channels(layer: nn.Module) -> int:
    weight = layer.weight
    assert isinstance(weight, torch.Tensor)
    transposed = bool(getattr(layer, "transposed", False))
    groups = int(getattr(layer, "groups", 1))
    return int(weight.shape[1] * groups if transposed else weight.shape[0])


def _fold_scale(norm: nn.modules.batchnorm._BatchNorm) -> torch.Tensor:
    """gamma / sqrt(running_var + eps): what the normalization multiplies each channel by in eval mode."""
    gamma = norm.weight.data if norm.affine else torch.ones(norm.num_features)
    variance = norm.running_var
    if variance is None:  # normalized by each batch's statistics even in eval mode: only gamma is fixed
        return gamma.clone()
    return gamma / torch.sqrt(variance + norm.eps)


class FoldedMagnitudeImportance(tp.importance.GroupMagnitudeImportance):  # type: ignore[misc]
    """Group L-p magnitude importance (`p`, mean over the group's layers, normalized by the mean) on folded weights.

    `norms` maps layers to the batch normalization folded into them (`folding_norms`); the normalizations'
    parameters are read at each call, so the scores follow the network as it is pruned step by step."""

    def __init__(self, norms: dict[nn.Module, nn.modules.batchnorm._BatchNorm], p: int = 2) -> None:
        super().__init__(p=p, group_reduction="mean", normalizer="mean", bias=False)
        self.norms = norms
        self.folded = set(norms.values())

    def _out_major(self, layer: nn.Module) -> torch.Tensor:
        """The layer's weights with output channels first, each scaled by the normalization folded into it."""
        weight = layer.weight
        assert isinstance(weight, torch.Tensor)
        w = weight.data.transpose(0, 1) if getattr(layer, "transposed", False) else weight.data
        norm = self.norms.get(layer)
        if norm is None:
            return w
        return w * _fold_scale(norm).to(w).view(-1, *([1] * (w.dim() - 1)))

    @torch.no_grad()
    def __call__(self, group: Any) -> torch.Tensor | None:
        group_imp: list[torch.Tensor] = []
        group_idxs: list[Any] = []
        for i, (dep, idxs) in enumerate(group):
            layer, prune_fn, root_idxs = dep.layer, dep.pruning_fn, group[i].root_idxs
            if prune_fn in (function.prune_conv_out_channels, function.prune_linear_out_channels):
                w = self._out_major(layer)[idxs].flatten(1)
                group_imp.append(w.abs().pow(self.p).sum(1))
                group_idxs.append(root_idxs)
            elif prune_fn in (function.prune_conv_in_channels, function.prune_linear_in_channels):
                local = self._out_major(layer).transpose(0, 1).flatten(1).abs().pow(self.p).sum(1)
                groups = getattr(layer, "groups", 1)
                if prune_fn == function.prune_conv_in_channels and groups not in (1, layer.in_channels):
                    local = local.repeat(groups)
                group_imp.append(local[idxs])
                group_idxs.append(root_idxs)
            elif prune_fn == function.prune_batchnorm_out_channels and layer not in self.folded and layer.affine:
                group_imp.append(layer.weight.data[idxs].abs().pow(self.p))  # not folded: scored as Torch-Pruning does
                group_idxs.append(root_idxs)
            elif prune_fn == function.prune_layernorm_out_channels and layer.elementwise_affine:
                group_imp.append(layer.weight.data[idxs].abs().pow(self.p))
                group_idxs.append(root_idxs)
        if not group_imp:
            return None
        scores: torch.Tensor = self._normalize(self._reduce(group_imp, group_idxs), self.normalizer)
        return scores
