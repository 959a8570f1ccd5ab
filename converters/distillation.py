"""Recovering a pruned model's accuracy by distillation: fine-tune it to reproduce the unpruned model's outputs.

Distillation needs no labels: the unpruned model (the teacher) labels every input itself, so the
calibration images the converter already reads are enough. The loss is the mean squared difference
between the pruned model's raw outputs and the teacher's, each output scaled by the teacher's own
variance so that outputs of different ranges weigh alike: for a classifier these are the logits, for a
detector the raw head outputs before any decoding or suppression, which are differentiable where the
decoded boxes are not. Where labels exist (--train-data x, y), cross-entropy on the first output is added.

The learning rate rises over the first steps and then follows a half cosine down to zero at the last step.
A constant rate stops wherever the last steps happened to leave the weights, still jumping by a full
step's size; a factory and its ONNX export, the same network parametrised differently, then end at
different points of that jitter. Decaying to zero lets both settle into the minimum they are in.

It runs on CUDA when PyTorch sees a GPU, otherwise on the CPU, with a time estimate after the first
epoch and a progress line per epoch.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from converters.calibration import read_training_arrays
from converters.errors import ConversionError
from converters.progress import step

if TYPE_CHECKING:
    from converters.prune_channels import ChannelPruneOptions

__all__ = [
    "DistillResult",
    "distil",
    "flat_outputs",
    "learning_rate_at",
    "output_disagreement",
    "read_labelled_data",
]

BAR_WIDTH = 20
WARMUP_SHARE = 0.05  # of all steps, rising linearly: Adam's first moment estimates are noisy


@dataclass(frozen=True)
class DistillResult:
    epochs: int
    samples: int
    labelled: bool
    device: str
    seconds: float
    first_loss: float
    final_loss: float


def distil(
    student: Any, teacher: Any, x: np.ndarray, y: np.ndarray | None, options: ChannelPruneOptions
) -> DistillResult:
    """Fine-tune `student` in place to match `teacher`'s outputs on `x` (and the labels `y`, where given)."""
    import torch

    if len(x) == 0:
        raise ConversionError("distillation needs at least one sample")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    student.to(device).train()
    teacher.to(device).eval()
    inputs = torch.from_numpy(np.ascontiguousarray(x, np.float32))
    labels = None if y is None else torch.from_numpy(np.asarray(y, np.int64))
    with torch.no_grad():
        targets = [t.detach() for t in flat_outputs(_batched(teacher, inputs, device))]
    for position, target in enumerate(targets):
        if not target.is_floating_point():
            raise ConversionError(
                f"distillation needs outputs that carry a gradient, and output {position} is {target.dtype} (decoded "
                "inside the graph, by ArgMax, TopK or NonMaxSuppression for instance); export the model without its "
                "decoding, ending at the raw head outputs, or give --distill-epochs 0"
            )
    scales = [t.var().clamp_min(1e-12) for t in targets]
    optimizer = torch.optim.Adam(student.parameters(), lr=options.learning_rate)
    steps = options.epochs * math.ceil(len(inputs) / options.batch_size)
    taken = 0
    generator = torch.Generator().manual_seed(options.seed)
    started = time.monotonic()
    losses: list[float] = []
    step(
        f"distilling the pruned model from the unpruned one on {device.type}: {options.epochs} epochs, "
        f"{len(x)} samples, learning rate {options.learning_rate:g} decaying to 0"
    )
    for epoch in range(options.epochs):
        order = torch.randperm(len(inputs), generator=generator)
        total = 0.0
        for start in range(0, len(order), options.batch_size):
            index = order[start : start + options.batch_size]
            outputs = flat_outputs(student(inputs[index].to(device)))
            loss = sum(
                (((o - t[index].to(device)) ** 2).mean() / s for o, t, s in zip(outputs, targets, scales, strict=True)),
                torch.zeros((), device=device),
            )
            if labels is not None and outputs[0].dim() == 2:
                loss = loss + torch.nn.functional.cross_entropy(outputs[0], labels[index].to(device))
            for group in optimizer.param_groups:
                group["lr"] = learning_rate_at(taken, steps, options.learning_rate)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            taken += 1
            total += float(loss.detach()) * len(index)
        losses.append(total / len(inputs))
        _progress(epoch + 1, options.epochs, losses[-1], time.monotonic() - started)
    student.eval().to("cpu")
    teacher.to("cpu")
    return DistillResult(
        epochs=options.epochs,
        samples=len(x),
        labelled=labels is not None,
        device=device.type,
        seconds=time.monotonic() - started,
        first_loss=losses[0],
        final_loss=losses[-1],
    )


def learning_rate_at(step: int, steps: int, peak: float) -> float:
    """The rate of step `step` (from 0) of `steps`: a linear rise over the first WARMUP_SHARE of them, then a half
    cosine from `peak` that would reach 0 one step after the last, so every step still moves the weights."""
    warmup = int(steps * WARMUP_SHARE)
    if step < warmup:
        return peak * (step + 1) / (warmup + 1)
    return peak * 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / (steps - warmup)))


def output_disagreement(student: Any, teacher: Any, x: np.ndarray) -> float:
    """Mean squared difference of the first outputs, over the teacher's variance: 0 when they agree."""
    import torch

    device = torch.device("cpu")
    student.eval()
    teacher.eval()
    inputs = torch.from_numpy(np.ascontiguousarray(x, np.float32))
    with torch.no_grad():
        got = flat_outputs(_batched(student, inputs, device))[0]
        want = flat_outputs(_batched(teacher, inputs, device))[0]
    return float(((got - want) ** 2).mean() / want.var().clamp_min(1e-12))


def read_labelled_data(path: Path, input_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """x shaped like the model's input (any batch size) and y one class index per sample, from an .npz."""
    x, y = read_training_arrays(path)
    if x.shape[1:] != tuple(input_shape[1:]):
        raise ConversionError(f"training data {path}: x has shape {list(x.shape)}, the model takes {list(input_shape)}")
    if len(y) != len(x) or not np.issubdtype(y.dtype, np.number) or not np.all(np.mod(y, 1) == 0):
        raise ConversionError(f"training data {path}: y must hold one integer class index per sample of x")
    return x.astype(np.float32), y.astype(np.int64)


def _batched(module: Any, inputs: Any, device: Any, batch_size: int = 64) -> Any:
    """The module's outputs over `inputs`, run in batches and concatenated per output."""
    import torch

    parts = [flat_outputs(module(inputs[i : i + batch_size].to(device))) for i in range(0, len(inputs), batch_size)]
    return [torch.cat([part[k] for part in parts]) for k in range(len(parts[0]))]


def flat_outputs(outputs: Any) -> list[Any]:
    """A model's outputs as a flat list of tensors, whatever tuples, lists or dicts hold them."""
    if isinstance(outputs, (tuple, list)):
        return [leaf for item in outputs for leaf in flat_outputs(item)]
    if isinstance(outputs, dict):
        return [leaf for item in outputs.values() for leaf in flat_outputs(item)]
    return [outputs]


def _progress(done: int, total: int, loss: float, elapsed: float) -> None:
    filled = round(BAR_WIDTH * done / total)
    left = elapsed / done * (total - done)
    eta = f", about {left:.0f} s left" if done < total else f", {elapsed:.0f} s"
    step(f"distilling [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] epoch {done}/{total}, loss {loss:.4g}{eta}")
