"""Distillation without labels: the pruned model moves toward the unpruned one on images it was not trained on."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import numpy as np
import pytest
from tiny_cnn import INPUT_SHAPE, digits_16, make_tiny_cnn

from converters.distillation import distil, learning_rate_at, output_disagreement, read_labelled_data
from converters.errors import ConversionError
from converters.prune_channels import ChannelPruneOptions, prune_module


def test_distillation_lowers_disagreement_on_held_back_images(tiny_cnn_factory: str) -> None:
    import torch

    images, _ = digits_16()
    train, held_back = images[:256], images[1500:1600]
    teacher = make_tiny_cnn().eval()
    student = copy.deepcopy(teacher)
    options = ChannelPruneOptions(share=0.5, epochs=4, learning_rate=3e-3)
    prune_module(student, torch.from_numpy(train[:1]), options)
    before = output_disagreement(student, teacher, held_back)
    result = distil(student, teacher, train, None, options)
    after = output_disagreement(student, teacher, held_back)
    assert before > 0.01, before  # pruning half the channels changed the outputs
    assert after < 0.5 * before, (before, after)
    assert result.final_loss < result.first_loss and not result.labelled and result.samples == 256
    assert student(torch.zeros(INPUT_SHAPE)).shape == (1, 10)


def test_labels_add_cross_entropy(tiny_cnn_factory: str) -> None:
    import torch

    images, labels = digits_16()
    teacher = make_tiny_cnn().eval()
    student = copy.deepcopy(teacher)
    options = ChannelPruneOptions(share=0.5, epochs=1)
    prune_module(student, torch.from_numpy(images[:1]), options)
    result = distil(student, teacher, images[:64], labels[:64], options)
    assert result.labelled and result.device in ("cpu", "cuda")


def test_labelled_data_is_checked(tmp_path: Path) -> None:
    np.savez(tmp_path / "bad.npz", x=np.zeros((4, 1, 8, 8), np.float32), y=np.zeros(4))
    with pytest.raises(ConversionError, match=r"x has shape \[4, 1, 8, 8\], the model takes \[1, 1, 16, 16\]"):
        read_labelled_data(tmp_path / "bad.npz", INPUT_SHAPE)
    np.savez(tmp_path / "nolabels.npz", x=np.zeros((4, 1, 16, 16), np.float32))
    with pytest.raises(ConversionError, match="needs arrays 'x' and 'y'"):
        read_labelled_data(tmp_path / "nolabels.npz", INPUT_SHAPE)
    np.savez(tmp_path / "fractional.npz", x=np.zeros((2, 1, 16, 16), np.float32), y=np.array([0.5, 1.0]))
    with pytest.raises(ConversionError, match="one integer class index per sample"):
        read_labelled_data(tmp_path / "fractional.npz", INPUT_SHAPE)


def test_decoded_outputs_are_refused_with_why() -> None:
    import torch

    class Decoded(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            classes: torch.Tensor = self.linear(x).argmax(dim=1)
            return classes

    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    with pytest.raises(ConversionError, match=r"output 0 is torch.int64 \(decoded inside the graph"):
        distil(Decoded(), Decoded(), x, None, ChannelPruneOptions(share=0.3, epochs=1))


def test_learning_rate_rises_then_decays_to_zero() -> None:
    rates = [learning_rate_at(step, 400, 1e-3) for step in range(400)]
    warmup = 20  # 5% of the steps
    assert rates[0] == pytest.approx(1e-3 / (warmup + 1))
    assert all(a < b for a, b in itertools.pairwise(rates[: warmup + 1]))
    assert rates[warmup] == pytest.approx(1e-3) and max(rates) == rates[warmup]
    assert all(a > b for a, b in itertools.pairwise(rates[warmup:]))
    assert rates[(400 + warmup) // 2] == pytest.approx(0.5e-3)
    assert 0 < rates[-1] < 1e-7
    assert [learning_rate_at(step, 3, 0.1) for step in range(3)] == pytest.approx([0.1, 0.075, 0.025])


def test_distillation_settles_at_the_best_fit_where_a_constant_rate_would_keep_jumping() -> None:
    """A linear student cannot reproduce a ReLU teacher, so each batch's gradient stays large at the best fit and a
    constant rate of 0.3 ends 2.3 times the best disagreement above it (0.1: 1.4 times); decayed, it lands on it."""
    import torch

    torch.manual_seed(0)
    teacher = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    student = torch.nn.Linear(8, 4)
    x = np.random.default_rng(0).standard_normal((256, 8)).astype(np.float32)
    distil(student, teacher, x, None, ChannelPruneOptions(share=0.3, epochs=20, learning_rate=0.3))
    with torch.no_grad():
        target = teacher(torch.from_numpy(x)).numpy().astype(np.float64)
    design = np.hstack([x, np.ones((len(x), 1), np.float32)]).astype(np.float64)
    best = design @ np.linalg.lstsq(design, target, rcond=None)[0]
    best_disagreement = float(((best - target) ** 2).mean() / target.var())
    assert output_disagreement(student, teacher, x) < 1.02 * best_disagreement, best_disagreement
