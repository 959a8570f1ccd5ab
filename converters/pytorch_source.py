"""PyTorch models given as `package.module:factory` or as a TorchScript file, exported to ONNX.

The model is built by calling the user's own factory, never by unpickling a checkpoint: a factory is
code the user wrote and can read, a pickle is code nobody reviewed. A TorchScript file is loaded with
`torch.jit.load`, which reads its code as TorchScript source and its tensors with a C++ unpickler that
builds only TorchScript types; its code still runs during the export, so it is trusted like a factory
(see `converters.sources`). Neither form records an input shape, hence --input-shape.

The exported ONNX file is then the source for every variant, and its agreement with the PyTorch module
on one input is checked here, so an exporter error stops the conversion instead of showing up as a
drop in every variant. The TorchScript exporter (`dynamo=False`) is used: the newer dynamo exporter
needs onnxscript, which is not a dependency of the converter.
"""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from converters.errors import ConversionError
from converters.progress import step
from converters.sources import SourceKind, SourceModel, detect_source, first_line

FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
ONNX_OPSET = 17
EXPORT_TOLERANCE = 1e-3


def open_model(model: Path, input_shape: tuple[int, ...] | None, scratch: Path) -> tuple[SourceModel, str]:
    """The model to convert and how the report names it; a PyTorch model is first exported to ONNX."""
    if is_factory_spec(str(model)):
        return export_factory(str(model), input_shape, scratch)
    source = detect_source(model)
    if source.kind is SourceKind.TORCHSCRIPT:
        return export_torchscript(source.path, input_shape, scratch)
    if input_shape is not None:
        raise ConversionError(
            "--input-shape is for PyTorch models given as package.module:factory or as a TorchScript file"
        )
    return source, source.label


def is_factory_spec(text: str) -> bool:
    """`pkg.module:make_model`, and not a path that exists (a Windows drive letter, say)."""
    return bool(FACTORY.match(text)) and not Path(text).exists()


def export_factory(spec: str, input_shape: tuple[int, ...] | None, scratch: Path) -> tuple[SourceModel, str]:
    """The factory's model exported to ONNX under `scratch`, and a line saying how it was made and checked."""
    shape = _checked_shape(spec, input_shape)
    module = _build(spec)
    return _export_module(module, f"pytorch {spec}", shape, scratch / f"{spec.split(':')[1]}.onnx")


def export_torchscript(path: Path, input_shape: tuple[int, ...] | None, scratch: Path) -> tuple[SourceModel, str]:
    """The TorchScript model at `path` exported to ONNX under `scratch`, checked like a factory's model."""
    shape = _checked_shape(f"{path} (TorchScript)", input_shape)
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript is deprecated, its files still load
            module = torch.jit.load(str(path), map_location="cpu")  # type: ignore[no-untyped-call]
    except Exception as error:
        raise ConversionError(f"torch.jit.load cannot read {path}: {first_line(error)}") from None
    return _export_module(module.eval(), f"pytorch TorchScript {path}", shape, scratch / f"{path.stem}.onnx")


def _checked_shape(label: str, input_shape: tuple[int, ...] | None) -> tuple[int, ...]:
    if input_shape is None:
        raise ConversionError(f"{label}: a PyTorch model needs --input-shape, e.g. --input-shape 1,3,224,224")
    if any(d <= 0 for d in input_shape):
        raise ConversionError(f"--input-shape {list(input_shape)}: every dimension must be positive")
    return input_shape


def _export_module(module: Any, label: str, input_shape: tuple[int, ...], dest: Path) -> tuple[SourceModel, str]:
    """`module` exported to `dest` and checked against ONNX Runtime on one random input; `label` names it."""
    import torch

    example = torch.from_numpy(np.random.default_rng(0).standard_normal(input_shape).astype(np.float32))
    step(f"exporting {label} to ONNX (opset {ONNX_OPSET}, input {list(input_shape)})")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.filterwarnings("ignore", "no signature found for <torch.ScriptMethod", UserWarning)
            torch.onnx.export(
                module, (example,), str(dest), input_names=["input"], opset_version=ONNX_OPSET, dynamo=False
            )
    except Exception as error:
        raise ConversionError(f"torch.onnx.export cannot export {label}: {first_line(error)}") from None
    difference = _export_difference(module, example, dest)
    if difference > EXPORT_TOLERANCE:
        raise ConversionError(
            f"{label}: the exported ONNX model differs from the PyTorch module by up to {difference:.3g} "
            f"(over {EXPORT_TOLERANCE:g}); the model may use ops the exporter does not translate faithfully"
        )
    origin = f"{label} exported by torch {torch.__version__} (max abs diff vs PyTorch {difference:.2g})"
    return SourceModel(path=dest, kind=SourceKind.ONNX), origin


def _build(spec: str) -> Any:
    import torch

    module_name, factory_name = spec.split(":")
    cwd = str(Path.cwd())
    if cwd not in sys.path:  # the console script does not put the working folder on the path
        sys.path.insert(0, cwd)
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except ImportError as error:
        raise ConversionError(f"{spec}: cannot import {module_name}: {first_line(error)}") from None
    except AttributeError:
        raise ConversionError(f"{spec}: module {module_name} has no {factory_name}") from None
    try:
        model = factory()
    except Exception as error:
        raise ConversionError(f"{spec}: calling {factory_name}() failed: {type(error).__name__}: {error}") from None
    if not isinstance(model, torch.nn.Module):
        raise ConversionError(f"{spec}: {factory_name}() returned {type(model).__name__}, not a torch.nn.Module")
    return model.eval()


def _export_difference(module: Any, example: Any, onnx_file: Path) -> float:
    import onnxruntime as ort
    import torch

    with torch.no_grad():
        expected = module(example)
    expected = expected[0] if isinstance(expected, (tuple, list)) else expected
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: example.numpy()})[0]
    return float(np.max(np.abs(np.asarray(got) - expected.numpy()))) if got.size else 0.0
