"""What every decoder takes and returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from edge_runtime.backends.base import TensorSpec
from edge_runtime.errors import ConfigError
from edge_runtime.preprocess import FrameTransform

D = TypeVar("D", bound="Decoder")


class DecoderParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Detection:
    """One object, with its box in source-image pixels."""

    label: str
    score: float
    box: tuple[float, float, float, float]  # x_min, y_min, x_max, y_max
    keypoints: tuple[tuple[float, float], ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "label": self.label,
            "score": round(self.score, 4),
            "box": [round(v, 1) for v in self.box],
        }
        if self.keypoints:
            data["keypoints"] = [[round(x, 1), round(y, 1)] for x, y in self.keypoints]
        return data


def dequantize(outputs: Sequence[np.ndarray], specs: Sequence[TensorSpec]) -> list[np.ndarray]:
    """Float views of quantized outputs, so decoders work on every variant alike."""
    result = []
    for array, spec in zip(outputs, specs, strict=True):
        if spec.quantization is not None and np.issubdtype(array.dtype, np.integer):
            q = spec.quantization
            array = (array.astype(np.float32) - q.zero_point) * q.scale
        result.append(array)
    return result


class Decoder(ABC):
    params_type: ClassVar[type[DecoderParams]]
    name: ClassVar[str]

    @classmethod
    def from_params(cls: type[D], params: Mapping[str, Any], labels: tuple[str, ...]) -> D:
        try:
            validated = cls.params_type.model_validate(dict(params))
        except ValidationError as error:
            from edge_runtime.package.manifest import describe_validation_error

            problems = "; ".join(f"decoder.params.{p}" for p in describe_validation_error(error))
            raise ConfigError(f"decoder {cls.name}: {problems}") from None
        return cls(validated, labels)

    @abstractmethod
    def __init__(self, params: Any, labels: tuple[str, ...]) -> None: ...

    @abstractmethod
    def decode(
        self, outputs: Sequence[np.ndarray], specs: Sequence[TensorSpec], transform: FrameTransform
    ) -> list[Detection]: ...
