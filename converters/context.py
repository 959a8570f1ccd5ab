"""What every variant builder gets, and what it hands back.

A builder is a function from a `BuildContext` to a `BuiltVariant`; a new output format is a new
module of builders registered in `converters.variants`, without touching the pipeline.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from converters.budget import DEFAULT_RECOVERY_ITERATIONS, DEFAULT_RECOVERY_SECONDS
from converters.calibration import Sample, SampleSet
from converters.sources import SourceModel
from edge_runtime.package.manifest import ModelFormat, Precision, Task

if TYPE_CHECKING:
    from converters.cache import BuildCache


@dataclass(frozen=True)
class QuantizationSettings:
    """How int8 variants are calibrated and quantized.

    Weights default to 7 bits for the OpenVINO and ONNX Runtime variants (`full_range_weights` off).

    x86 CPUs without VNNI or AMX (AVX2, and AVX-512 before Cascade Lake: most Atom, Celeron and older Core
    boxes, and Ryzen before Zen 4) multiply unsigned 8-bit activations by signed 8-bit weights with
    VPMADDUBSW, which adds each pair of products into a signed 16-bit lane and saturates there: 2 x 255 x 127
    does not fit in 32,767. oneDNN (under OpenVINO) and MLAS (under ONNX Runtime) both use it on such CPUs,
    while VNNI and AMX accumulate in 32 bits. So the same int8 model gives different outputs on the
    workstation that converted it and on the box that runs it. With weights kept within 7 bits (NNCF's
    overflow fix, ONNX Runtime's reduce_range) no pair can exceed 2 x 255 x 64 = 32,640, every CPU computes
    the same integers, and the accuracy measured here holds on the box. LiteRT needs nothing of the kind:
    XNNPACK and TFLite's kernels widen to 16 bits before multiplying, so they never saturate.
    """

    subset_size: int = 300
    preset: str = "performance"  # or "mixed": asymmetric activations
    fast_bias_correction: bool = True
    ignored_scope: tuple[str, ...] = ()  # regular expressions matched at the start of node names
    max_drop: float = 0.01  # top-1 drop (fraction) that accuracy-controlled quantization may cost
    tflite_io: str = "int8"  # input/output type of full-integer TFLite variants: int8 or uint8
    full_range_weights: bool = False
    seed: int = 0
    recovery_seconds: float = DEFAULT_RECOVERY_SECONDS  # time int8 recovery and accuracy control may take
    recovery_iterations: int = DEFAULT_RECOVERY_ITERATIONS  # groups accuracy control may revert to float

    def weight_range_note(self) -> str:
        """What the report says about the int8 weight range of OpenVINO and ONNX variants."""
        if self.full_range_weights:
            return (
                "8-bit weights in every layer (--full-range-weights): exact on CPUs with VNNI or AMX and on ARM, "
                "but x86 CPUs without them can saturate and compute other results"
            )
        return "7-bit weights, which every CPU computes exactly (x86 without VNNI saturates on 8-bit weights)"

    def ignores(self, node_name: str) -> bool:
        return any(re.match(pattern, node_name) for pattern in self.ignored_scope)


@dataclass(frozen=True)
class BuildContext:
    source: SourceModel
    out_dir: Path
    calibration: SampleSet | None
    validation: SampleSet | None
    task: Task
    settings: QuantizationSettings
    cache: BuildCache | None = None  # quantizations of earlier conversions of the same model and data

    def variant_dir(self, variant_id: str) -> Path:
        """`openvino/int8` lives in OUT/openvino/int8/, like the packages the runtime ships."""
        folder = self.out_dir / variant_id
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def relative(self, path: Path) -> str:
        return path.relative_to(self.out_dir).as_posix()

    @property
    def accuracy_control(self) -> bool:
        """Accuracy-controlled quantization needs a labelled validation set and a top-1 metric."""
        return self.validation is not None and self.validation.labels is not None and self.task is Task.CLASSIFICATION


@dataclass(frozen=True)
class BuiltVariant:
    format: ModelFormat
    precision: Precision
    files: tuple[str, ...]  # relative to the output folder, model file first
    notes: tuple[str, ...] = ()
    target: str | None = None  # hardware the file is compiled for (edgetpu), which nothing else runs


Builder = Callable[[BuildContext], BuiltVariant]


def model_input(sample: Sample) -> np.ndarray | list[np.ndarray]:
    """A sample as quantizers feed it: the array itself for one input, a list in input order for several."""
    return sample[0] if len(sample) == 1 else list(sample)


def top1_hits(scores: Iterable[np.ndarray], labels: Iterable[int]) -> list[float]:
    """1.0 where a sample's highest score is its label, else 0.0."""
    return [float(int(np.argmax(np.asarray(s).reshape(-1))) == int(y)) for s, y in zip(scores, labels, strict=True)]
