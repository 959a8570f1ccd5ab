"""Frame preprocessing folded into an OpenVINO graph through `openvino.preprocess.PrePostProcessor`.

OpenVINO is imported inside `fold_preprocessing`, so the options class can be validated without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from edge_runtime.backends.openvino.devices import first_line
from edge_runtime.config.base import StrictModel
from edge_runtime.errors import ConfigError
from edge_runtime.package.manifest import InputSpec


class EmbeddedPreprocessing(StrictModel):
    """Preprocessing folded into the compiled graph, so the caller feeds raw uint8 NHWC frames.

    The device then does the conversion, colour swap, resize and normalisation itself (on a GPU or
    NPU that saves a host-side pass over every frame). Only a plain stretch resize can be folded.
    """

    frame_height: int = Field(ge=1)
    frame_width: int = Field(ge=1)
    frame_color: Literal["BGR", "RGB"] = "BGR"
    model_color: Literal["BGR", "RGB", "GRAY"] | None = Field(
        default=None, description="Colour order the model expects; None keeps the frame's."
    )
    model_layout: Literal["NHWC", "NCHW"]
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    input_name: str | None = Field(default=None, description="Model input to fold into; None: the only one.")

    @classmethod
    def from_input_spec(
        cls, spec: InputSpec, frame_height: int, frame_width: int, frame_color: Literal["BGR", "RGB"] = "BGR"
    ) -> EmbeddedPreprocessing:
        """Folding as the manifest describes the input, for frames of the given size and colour order."""
        if spec.layout not in ("NHWC", "NCHW"):
            raise ConfigError(f"cannot fold preprocessing for input layout {spec.layout!r}: need NHWC or NCHW")
        if spec.resize != "stretch":
            raise ConfigError(
                f"cannot fold resize {spec.resize!r} into the graph (only 'stretch'); preprocess on the host"
            )
        return cls(
            frame_height=frame_height,
            frame_width=frame_width,
            frame_color=frame_color,
            model_color=spec.color_order,
            model_layout=spec.layout,
            mean=spec.mean,
            std=spec.std,
            input_name=spec.name,
        )


def _per_channel(values: tuple[float, ...]) -> float | list[float]:
    return values[0] if len(values) == 1 else list(values)


def fold_preprocessing(model: Any, pre: EmbeddedPreprocessing, path: Path) -> Any:
    """Rebuild the model so its input is a uint8 NHWC frame; resize is linear to the model's size."""
    from openvino import Layout, Type
    from openvino.preprocess import ColorFormat, PrePostProcessor, ResizeAlgorithm

    names = [name for port in model.inputs for name in port.get_names()]
    if pre.input_name is not None and pre.input_name not in names:
        raise ConfigError(f"embedded_preprocessing.input_name {pre.input_name!r} is not an input of {path}")
    if pre.input_name is None and len(model.inputs) != 1:
        raise ConfigError(f"{path} has {len(model.inputs)} inputs: set embedded_preprocessing.input_name")
    ppp = PrePostProcessor(model)
    port = ppp.input(pre.input_name) if pre.input_name is not None else ppp.input()
    port.tensor().set_element_type(Type.u8).set_layout(Layout("NHWC")).set_color_format(
        getattr(ColorFormat, pre.frame_color)
    ).set_spatial_static_shape(pre.frame_height, pre.frame_width)
    steps = port.preprocess().convert_element_type(Type.f32)
    if pre.model_color not in (None, pre.frame_color):
        steps.convert_color(getattr(ColorFormat, pre.model_color))
    steps.resize(ResizeAlgorithm.RESIZE_LINEAR)
    if pre.mean is not None:
        steps.mean(_per_channel(pre.mean))
    if pre.std is not None:
        steps.scale(_per_channel(pre.std))
    port.model().set_layout(Layout(pre.model_layout))
    try:
        return ppp.build()
    except Exception as error:
        raise ConfigError(f"cannot fold preprocessing into {path}: {first_line(error)}") from None
