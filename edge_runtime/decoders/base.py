"""What every decoder takes and returns, and the helpers they share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
from pydantic import ValidationError

from edge_runtime.backends.base import TensorSpec
from edge_runtime.config.base import StrictModel
from edge_runtime.decoders.decoded import Decoded, Detection, Detections, Landmark
from edge_runtime.errors import ConfigError, ModelMismatchError
from edge_runtime.pipeline.preprocess import FrameTransform

__all__ = [
    "Decoded",
    "Decoder",
    "DecoderParams",
    "Detection",
    "Detections",
    "Landmark",
    "dequantize",
    "label_for",
    "select_output",
]

D = TypeVar("D", bound="Decoder")


class DecoderParams(StrictModel):
    """A decoder's parameters from the manifest's `decoder.params`; each decoder extends it with its own."""


def dequantize(outputs: Sequence[np.ndarray], specs: Sequence[TensorSpec]) -> list[np.ndarray]:
    """Float views of quantized outputs, so decoders work on every variant alike."""
    result = []
    for array, spec in zip(outputs, specs, strict=True):
        if spec.quantization is not None and np.issubdtype(array.dtype, np.integer):
            q = spec.quantization
            array = (array.astype(np.float32) - q.zero_point) * q.scale
        result.append(array)
    return result


def select_output(
    outputs: Sequence[np.ndarray], specs: Sequence[TensorSpec], selector: int | str, decoder: str
) -> tuple[np.ndarray, TensorSpec]:
    """The output a decoder reads, chosen by position or by tensor name (params `output`)."""
    if isinstance(selector, str):
        names = [spec.name for spec in specs]
        if selector not in names:
            raise ModelMismatchError(f"decoder {decoder}: the model has no output {selector!r}; it has {names}")
        index = names.index(selector)
    else:
        index = selector
        if not 0 <= index < len(outputs):
            raise ModelMismatchError(
                f"decoder {decoder}: expected an output at index {index}, the model has {len(outputs)} outputs"
            )
    return outputs[index], specs[index]


def label_for(labels: Sequence[str], index: int) -> str:
    """The label of a class index; the index itself where the labels list is short or missing."""
    return labels[index] if 0 <= index < len(labels) else str(index)


class Decoder(ABC):
    """Turns one inference's outputs into a `Decoded` result.

    Decoders are built once per pipeline from the manifest's `decoder` entry and then called per frame
    or window; anything that depends only on the parameters is computed in `__init__` or on first use.
    """

    params_type: ClassVar[type[DecoderParams]]
    name: ClassVar[str]
    gives: ClassVar[type[Decoded]]  # what `decode` returns, for checks made before a model runs

    @classmethod
    def from_params(cls: type[D], params: Mapping[str, Any], labels: tuple[str, ...]) -> D:
        try:
            validated = cls.params_type.model_validate(dict(params))
        except ValidationError as error:
            from edge_runtime.config.base import describe_validation_error

            problems = "; ".join(f"decoder.params.{p}" for p in describe_validation_error(error))
            raise ConfigError(f"decoder {cls.name}: {problems}") from None
        return cls(validated, labels)

    @abstractmethod
    def __init__(self, params: Any, labels: tuple[str, ...]) -> None: ...

    @abstractmethod
    def decode(
        self, outputs: Sequence[np.ndarray], specs: Sequence[TensorSpec], transform: FrameTransform | None = None
    ) -> Decoded:
        """`transform` maps model coordinates to source pixels; None for inputs that are not images."""

    def _need_transform(self, transform: FrameTransform | None) -> FrameTransform:
        """Decoders that report positions can only run behind an image input."""
        if transform is None:
            raise ConfigError(f"decoder {self.name} reports image positions and needs an image input, not a window")
        return transform
