"""Folded-weight channel importance: a factory and its ONNX export (normalization folded, then put back) remove the
same channels, and a channel its batch normalization scales to almost nothing ranks as unimportant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from converters.prune_channels import ChannelPruneOptions, prune_module


def _trained_like(make: Any, images: np.ndarray) -> Any:
    """The tiny CNN with batch statistics of real images and scales far from 1, so that raw and folded weights rank
    channels differently (a freshly built network's normalizations are identities)."""
    import torch

    model = make()
    generator = torch.Generator().manual_seed(1)
    model.train()
    with torch.no_grad():
        model(torch.from_numpy(images))
        for norm in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)):
            norm.weight.copy_(torch.exp(torch.randn(norm.num_features, generator=generator)))
            norm.bias.copy_(0.1 * torch.randn(norm.num_features, generator=generator))
    return model.eval()


def _kept_channels(module: Any, example: Any) -> tuple[list[Any], list[np.ndarray]]:
    """Per convolution, in the order they run: the module, and a value that names each of its output channels (the
    shift of the normalization behind it, else its own bias), to find the kept channels after pruning."""
    import torch
    import torch_pruning as tp

    from converters.channel_importance import folding_norms

    norms = folding_norms(tp.DependencyGraph().build_dependency(module, example_inputs=example))
    order: list[Any] = []
    convolutions = [m for m in module.modules() if isinstance(m, torch.nn.Conv2d)]
    hooks = [m.register_forward_hook(lambda m, *_: order.append(m)) for m in convolutions]
    with torch.no_grad():
        module(example)
    for hook in hooks:
        hook.remove()
    names = [norms[m].bias if m in norms else m.bias for m in order]
    return order, [np.asarray(name.detach().numpy(), np.float64).copy() for name in names]


def _prune_and_index(module: Any, example: Any, options: ChannelPruneOptions) -> list[tuple[int, list[int]]]:
    """Per convolution, in the order they run: its channels before pruning, and the indices of those kept."""
    layers, before = _kept_channels(module, example)
    prune_module(module, example, options)
    _, after = _kept_channels(module, example)
    kept = []
    for old, new in zip(before, after, strict=True):
        assert len(np.unique(old)) == len(old)  # every channel named by a value of its own
        kept.append((len(old), [int(np.flatnonzero(old == value)[0]) for value in new]))
    assert len(layers) == len(kept)
    return kept


def test_factory_and_onnx_export_remove_the_same_channels(tiny_cnn_factory: str, tmp_path: Path) -> None:
    import torch
    from tiny_cnn import INPUT_SHAPE, digits_16, make_tiny_cnn

    from converters.onnx_modules import onnx_module, with_batch_norm

    images = digits_16()[0][:256]
    model = _trained_like(make_tiny_cnn, images)
    path = tmp_path / "tiny_cnn.onnx"
    torch.onnx.export(model, (torch.zeros(INPUT_SHAPE),), str(path), opset_version=17, dynamo=False)
    rebuilt = onnx_module(path)
    with_batch_norm(rebuilt, images)
    example = torch.from_numpy(images[:1])
    options = ChannelPruneOptions(share=0.5, round_to=4)
    factory_kept = _prune_and_index(model, example, options)
    onnx_kept = _prune_and_index(rebuilt, example, options)
    assert factory_kept == onnx_kept
    assert sum(before > len(kept) for before, kept in factory_kept) >= 2  # channels went from more than one layer
    # The same channels removed from the same function: the pruned networks compute the same function too.
    x = torch.from_numpy(images[:64])
    with torch.no_grad():
        want, got = model.eval()(x).numpy(), rebuilt.eval()(x).numpy()
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()


def test_a_channel_its_normalization_silences_goes_first() -> None:
    import torch
    import torch_pruning as tp
    from torch import nn

    from converters.channel_importance import FoldedMagnitudeImportance, folding_norms

    conv, norm, reader = nn.Conv2d(1, 4, 3, bias=False), nn.BatchNorm2d(4), nn.Conv2d(4, 2, 1)
    model = nn.Sequential(conv, norm, nn.ReLU(), reader).eval()
    with torch.no_grad():
        conv.weight.fill_(1.0)
        conv.weight[2].fill_(5.0)  # the largest raw weights ...
        norm.weight.copy_(torch.tensor([1.0, 1.0, 1e-3, 1.0]))  # ... scaled to almost nothing
        reader.weight.fill_(1.0)
    example = torch.zeros(1, 1, 8, 8)
    graph = tp.DependencyGraph().build_dependency(model, example_inputs=example)
    assert folding_norms(graph) == {conv: norm}
    group = graph.get_pruning_group(conv, tp.prune_conv_out_channels, idxs=[0, 1, 2, 3])
    folded = FoldedMagnitudeImportance(folding_norms(graph))(group)
    raw = tp.importance.GroupMagnitudeImportance(p=2)(group)
    assert folded is not None
    assert int(torch.argmin(folded)) == 2
    assert int(torch.argmax(raw)) == 2
