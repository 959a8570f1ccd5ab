"""How far a variant is from the fp32 reference: output agreement, accuracy, and one "drop" figure.

The drop is what the ship/do-not-ship flag looks at, in points: mAP@0.5 lost when annotated boxes
exist (detection), top-1 accuracy lost when labels exist; without either, the share of samples whose
predicted class changed for a classifier, and for other tasks the mean output error as a percentage
of the reference output's value range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from converters.detection_metrics import DetectionAccuracy
from converters.errors import ConversionError


@dataclass(frozen=True)
class RunOutputs:
    """Every output of a model over an evaluation set: arrays shaped (samples, *output shape), float64."""

    names: list[str]
    arrays: list[np.ndarray]

    def scores(self) -> np.ndarray:
        """The first output, one row per sample: a classifier's class scores."""
        first = self.arrays[0]
        return first.reshape(len(first), -1)


@dataclass(frozen=True)
class OutputAgreement:
    name: str
    max_abs_error: float
    mean_abs_error: float
    cosine: float
    relative_mean_error: float  # mean abs error over the reference output's value range


@dataclass(frozen=True)
class Agreement:
    outputs: tuple[OutputAgreement, ...]
    top1_agreement: float | None  # share of samples with the reference's predicted class (classifiers)

    @property
    def max_abs_error(self) -> float:
        return max(o.max_abs_error for o in self.outputs)

    @property
    def mean_abs_error(self) -> float:
        return max(o.mean_abs_error for o in self.outputs)

    @property
    def cosine(self) -> float:
        return min(o.cosine for o in self.outputs)


@dataclass(frozen=True)
class Accuracy:
    top1: float
    top5: float | None


@dataclass(frozen=True)
class Drop:
    points: float
    metric: str


def agreement(reference: RunOutputs, candidate: RunOutputs, classification: bool) -> Agreement:
    order = match_outputs(reference.names, candidate.names)
    outputs = []
    for ref_index, cand_index in enumerate(order):
        ref = reference.arrays[ref_index]
        got = candidate.arrays[cand_index].reshape(ref.shape)
        diff = np.abs(got - ref)
        value_range = float(ref.max() - ref.min()) or 1.0
        outputs.append(
            OutputAgreement(
                name=reference.names[ref_index],
                max_abs_error=float(diff.max()),
                mean_abs_error=float(diff.mean()),
                cosine=cosine_similarity(ref, got),
                relative_mean_error=float(diff.mean()) / value_range,
            )
        )
    top1 = None
    if classification:
        same = np.argmax(reference.scores(), axis=1) == np.argmax(candidate.scores(), axis=1)
        top1 = float(same.mean())
    return Agreement(tuple(outputs), top1)


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    x, y = a.reshape(-1), b.reshape(-1)
    norms = float(np.linalg.norm(x) * np.linalg.norm(y))
    if norms == 0.0:
        return 1.0 if not np.any(x) and not np.any(y) else 0.0
    return float(np.dot(x, y) / norms)


def accuracy(outputs: RunOutputs, labels: np.ndarray) -> Accuracy:
    scores = outputs.scores()
    if labels.min() < 0 or labels.max() >= scores.shape[1]:
        raise ConversionError(
            f"validation labels run from {labels.min()} to {labels.max()}, but the model scores "
            f"{scores.shape[1]} classes in its first output"
        )
    ranked = np.argsort(-scores, axis=1)
    top1 = float((ranked[:, 0] == labels).mean())
    top5 = float((ranked[:, :5] == labels[:, None]).any(axis=1).mean()) if scores.shape[1] > 5 else None
    return Accuracy(top1, top5)


def drop_of(
    reference: Accuracy | None,
    candidate: Accuracy | None,
    agreed: Agreement,
    reference_boxes: DetectionAccuracy | None = None,
    candidate_boxes: DetectionAccuracy | None = None,
) -> Drop:
    """The figure the flag looks at: task accuracy lost where ground truth exists, else disagreement with fp32."""
    if reference_boxes is not None and candidate_boxes is not None:
        return Drop(100.0 * (reference_boxes.map50 - candidate_boxes.map50), "mAP@0.5 lost, in points")
    if reference is not None and candidate is not None:
        return Drop(100.0 * (reference.top1 - candidate.top1), "top-1 accuracy lost, in points")
    if agreed.top1_agreement is not None:
        return Drop(100.0 * (1.0 - agreed.top1_agreement), "samples whose predicted class changed, in %")
    worst = max(o.relative_mean_error for o in agreed.outputs)
    return Drop(100.0 * worst, "mean output error, in % of the reference output's range")


def match_outputs(reference: Sequence[str], candidate: Sequence[str]) -> list[int]:
    """Pairs outputs by name where every name matches, by position otherwise."""
    if len(reference) != len(candidate):
        raise ConversionError(f"the reference has {len(reference)} outputs, the variant has {len(candidate)}")
    if sorted(reference) == sorted(candidate):
        return [list(candidate).index(name) for name in reference]
    return list(range(len(reference)))
