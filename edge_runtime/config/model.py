"""A model as a config names it, for a pipeline and for a served model alike: where its package is, and
what of the backend, device and precision the owner pins rather than leaving to the device profile.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from edge_runtime.backends import BACKENDS, BackendKey
from edge_runtime.config.base import StrictModel
from edge_runtime.package.manifest import Precision

__all__ = ["ModelConfig"]


class ModelConfig(StrictModel):
    """The model of a pipeline and how to run it; unset fields leave the choice to the device profile."""

    path: Path = Field(
        description="model package directory (with model.yaml) or bare model file (.xml, .tflite, .onnx); "
        "relative to the config file's directory",
        examples=["models/face_detection"],
    )
    backend: BackendKey | None = Field(default=None, description="pin a backend: openvino, litert or onnxruntime")
    device: str | None = Field(default=None, min_length=1, description="pin a device, e.g. CPU, GPU, NPU, CUDA")
    precision: Precision | None = Field(default=None, description="run at this precision: fp32, fp16, bf16, int8")
    variant: str | None = Field(default=None, description="pin a package variant, e.g. openvino/int8")
    threads: int | None = Field(default=None, ge=1, description="inference threads; default: the profile's")
    hint: Literal["latency", "throughput"] | None = Field(
        default=None,
        description="the backend's performance hint; default: the profile's, else throughput for input ready at "
        "once (a file not played in realtime, a folder, a replay without rate_hz) and latency for live sources",
    )
    max_in_flight: int | None = Field(
        default=None,
        ge=1,
        description="inferences running at once; default: as many as the backend finds best for the device",
    )
    select: Literal["profile", "fastest"] = Field(
        default="profile",
        description="how the box picks among the package's variants and backends: `profile`, the device profile's "
        "order; `fastest`, the fastest that stays within fidelity_tolerance (default 2% of the output range), which "
        "the box measures by itself once per package release, running the profile's choice meanwhile, and keeps "
        "in its state directory as `bench --select` does; a pipeline's model moves onto it between two frames, a "
        "served model or a cascade stage's at its next load. A choice stored by `bench --select` is taken either way",
    )
    fidelity_tolerance: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="if set, compare the chosen backend with the fp32 reference at load and refuse it when its "
        "largest error exceeds this fraction of the output range",
    )

    @field_validator("variant")
    @classmethod
    def _variant_id(cls, variant: str | None) -> str | None:
        if variant is not None and not re.fullmatch(r"[a-z0-9]+/[A-Za-z0-9._-]+", variant):
            raise ValueError(f"{variant!r} is not a variant id like 'openvino/int8' or 'tflite/fp32'")
        return variant

    @model_validator(mode="after")
    def _variant_loadable_by_backend(self) -> ModelConfig:
        if self.backend is not None and self.variant is not None:
            kind = self.variant.split("/")[0]
            loadable = sorted(f.value for f in BACKENDS[self.backend].formats)
            if kind not in loadable:
                raise ValueError(f"backend {self.backend} cannot load {kind} variants (it loads {', '.join(loadable)})")
        return self
