"""A tiny CNN with the structures channel pruning must respect, and real images to feed it.

A residual addition (its branches share channels), an inverted bottleneck with a depthwise convolution
(its input and output channels are tied) and a linear head; inputs are scikit-learn's handwritten digits
upscaled to 16x16, one channel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

MODULE = "edge_convert_tiny_cnn"
FACTORY = f"{MODULE}:make_tiny_cnn"
INPUT_SHAPE = (1, 1, 16, 16)
SOURCE = """
import torch
from torch import nn


class TinyCnn(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.Conv2d(32, 16, 1))
        depthwise = nn.Conv2d(64, 64, 3, padding=1, groups=64)
        self.expand = nn.Sequential(nn.Conv2d(16, 64, 1), nn.ReLU(), depthwise, nn.ReLU())
        self.project = nn.Conv2d(64, 32, 1)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        x = self.project(self.expand(x))
        return self.head(x.mean(dim=(2, 3)))


def make_tiny_cnn():
    return TinyCnn()
"""


def digits_16() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits scaled to 0-1 and upscaled to 16x16: (N, 1, 16, 16) float32 and the labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    return np.repeat(np.repeat(images, 2, axis=2), 2, axis=3), digits.target.astype(np.int64)


def write_factory(folder: Path) -> str:
    """The factory's module written into `folder` (which the caller puts on sys.path); its spec."""
    (folder / f"{MODULE}.py").write_text(SOURCE)
    return FACTORY


def make_tiny_cnn() -> Any:
    """The factory's model, imported from where `write_factory` wrote it."""
    import importlib

    return importlib.import_module(MODULE).make_tiny_cnn()
