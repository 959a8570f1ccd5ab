"""Fidelity check: does a backend/precision choice compute what the fp32 model computes?

Accelerators and plugins trade accuracy for speed behind the user's back (OpenVINO's CPU plugin
runs bf16 by default on CPUs that have it; a pose detector's outputs then move by tens of units).
The check feeds the same inputs to the candidate and to a reference (the fp32 variant on the CPU at
explicit fp32) and reports, per output, the largest absolute error and that error relative to the
reference's value range. A tolerance turns the report into a verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import cv2
import numpy as np

from edge_runtime.backends import backend_for_format
from edge_runtime.backends.base import TensorSpec
from edge_runtime.errors import FidelityError
from edge_runtime.package.loader import ModelPackage
from edge_runtime.package.manifest import Precision
from edge_runtime.pipeline.preprocess import ImagePreprocessor
from edge_runtime.placement.model import LoadedModel, load_model

DEFAULT_TOLERANCE = 0.02  # of the reference output's value range


@dataclass(frozen=True)
class OutputError:
    name: str
    max_abs_error: float
    mean_abs_error: float
    max_rel_error: float  # max_abs_error / value range of the reference output
    mean_rel_error: float  # mean_abs_error / the same range


@dataclass(frozen=True)
class FidelityReport:
    candidate: str
    reference: str
    samples: int
    tolerance: float
    outputs: list[OutputError] = field(default_factory=list)

    @property
    def max_rel_error(self) -> float:
        return max((o.max_rel_error for o in self.outputs), default=0.0)

    @property
    def mean_rel_error(self) -> float:
        """The mean error of the output that is off the most on average, as a fraction of its range."""
        return max((o.mean_rel_error for o in self.outputs), default=0.0)

    @property
    def passed(self) -> bool:
        return self.max_rel_error <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(max_rel_error=self.max_rel_error, mean_rel_error=self.mean_rel_error, passed=self.passed)
        return data

    def raise_if_failed(self) -> None:
        if not self.passed:
            worst = max(self.outputs, key=lambda o: o.max_rel_error)
            raise FidelityError(
                f"{self.candidate} differs from the fp32 reference {self.reference}: output {worst.name!r} "
                f"max abs error {worst.max_abs_error:.4g} ({worst.max_rel_error:.2%} of its range) exceeds the "
                f"tolerance of {self.tolerance:.2%}"
            )


def synthetic_frames(count: int, height: int, width: int, seed: int = 0) -> list[np.ndarray]:
    """BGR uint8 frames with structure at several scales, closer to photographs than white noise."""
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(count):
        frame = np.zeros((height, width, 3), np.float32)
        for cells, weight in ((2, 0.5), (8, 0.3), (32, 0.2)):
            grid = rng.uniform(0, 255, (cells, cells, 3)).astype(np.float32)
            frame += weight * cv2.resize(grid, (width, height), interpolation=cv2.INTER_CUBIC)
        frames.append(np.clip(frame, 0, 255).astype(np.uint8))
    return frames


def feed_for(model: LoadedModel, frames: Sequence[np.ndarray], seed: int) -> list[list[np.ndarray]]:
    """The same logical inputs expressed in each model's own tensor types (float or quantized)."""
    preprocessors = [
        ImagePreprocessor(spec, tensor) if spec.spatial_size else None
        for spec, tensor in zip(model.input_specs, model.inputs, strict=True)
    ]
    feeds = []
    for index, frame in enumerate(frames):
        rng = np.random.default_rng(seed + index)
        feed = []
        for pre, tensor in zip(preprocessors, model.inputs, strict=True):
            feed.append(pre(frame)[0] if pre is not None else _random_tensor(tensor, rng))
        feeds.append(feed)
    return feeds


def _random_tensor(tensor: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(1 if d is None else d for d in tensor.shape)
    values = rng.standard_normal(shape).astype(np.float32)
    if tensor.quantization is not None:
        q = tensor.quantization
        info = np.iinfo(np.dtype(tensor.dtype))
        quantized = np.clip(np.rint(values / q.scale + q.zero_point), info.min, info.max)
        return np.asarray(quantized, dtype=tensor.dtype)
    return np.asarray(values, dtype=tensor.dtype)


def compare(
    candidate: LoadedModel,
    reference: LoadedModel,
    samples: int = 8,
    tolerance: float = DEFAULT_TOLERANCE,
    seed: int = 0,
) -> FidelityReport:
    size = candidate.input_specs[0].spatial_size or (224, 224)
    frames = synthetic_frames(samples, size[0] * 2, size[1] * 2, seed)
    candidate_runs = [_float_outputs(candidate, feed) for feed in feed_for(candidate, frames, seed)]
    reference_runs = [_float_outputs(reference, feed) for feed in feed_for(reference, frames, seed)]
    names = [t.name for t in reference.outputs]
    order = _match_outputs(names, [t.name for t in candidate.outputs])
    errors = []
    for ref_index, cand_index in enumerate(order):
        ref = np.stack([run[ref_index] for run in reference_runs])
        got = np.stack([run[cand_index] for run in candidate_runs]).reshape(ref.shape)
        diff = np.abs(got - ref)
        value_range = float(ref.max() - ref.min()) or 1.0
        errors.append(
            OutputError(
                name=names[ref_index],
                max_abs_error=float(diff.max()),
                mean_abs_error=float(diff.mean()),
                max_rel_error=float(diff.max()) / value_range,
                mean_rel_error=float(diff.mean()) / value_range,
            )
        )
    return FidelityReport(candidate.label, reference.label, samples, tolerance, errors)


def _float_outputs(model: LoadedModel, feed: list[np.ndarray]) -> list[np.ndarray]:
    from edge_runtime.decoders.base import dequantize

    return [o.astype(np.float64) for o in dequantize(model.infer(feed), model.outputs)]


def _match_outputs(reference: list[str], candidate: list[str]) -> list[int]:
    """Pairs outputs by name where every name matches, by position otherwise."""
    if len(reference) != len(candidate):
        raise FidelityError(f"reference has {len(reference)} outputs, candidate has {len(candidate)}")
    if sorted(reference) == sorted(candidate):
        return [candidate.index(name) for name in reference]
    return list(range(len(reference)))


def load_reference(
    package: ModelPackage, variant_id: str | None, cache: dict[str, LoadedModel] | None = None
) -> LoadedModel:
    """The fp32 variant on the CPU at explicit fp32, of the candidate's own format where the package has one."""
    variants = package.manifest.variants
    fp32 = [vid for vid, v in variants.items() if v.precision is Precision.FP32 and v.target is None]
    if not fp32:
        raise FidelityError(f"model {package.name} has no fp32 variant to compare against")
    own_format = variant_id.split("/")[0] if variant_id else ""
    reference_id = next((vid for vid in fp32 if vid.startswith(own_format + "/")), fp32[0])
    cache = {} if cache is None else cache
    if reference_id not in cache:
        backend = backend_for_format(variants[reference_id].format)
        cache[reference_id] = load_model(package, reference_id, backend, {"device": "CPU", "precision": "fp32"})
    return cache[reference_id]
