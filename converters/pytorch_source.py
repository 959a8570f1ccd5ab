"""PyTorch models given as `package.module:factory`, a TorchScript file or a torch.export program, exported to ONNX.

The model is built by calling the user's own factory, never by unpickling a checkpoint: a factory is
code the user wrote and can read, a pickle is code nobody reviewed. A TorchScript file is loaded with
`torch.jit.load`, which reads its code as TorchScript source and its tensors with a C++ unpickler that
builds only TorchScript types; its code still runs during the export, so it is trusted like a factory
(see `converters.sources`). Neither form records an input shape, hence --input-shape.

A torch.export program (.pt2) records its input shape, and its archive has been inspected by
`converters.sources` so that nothing in it is read by plain pickle. What torch.export.load still reads
with `torch.load` (the example inputs, which it retries with weights_only=False when the weights-only
load fails) is forced to the weights-only unpickler with PyTorch's TORCH_FORCE_WEIGHTS_ONLY_LOAD, which
overrides an explicit weights_only=False and is set only around the load. The loaded graph may name any
callable reachable from the torch module, so before it runs it must call only PyTorch operators.

The exported ONNX file is then the source for every variant, and its agreement with the PyTorch module
on one input is checked here, so an exporter error stops the conversion instead of showing up as a
drop in every variant. The TorchScript exporter (`dynamo=False`) is used: the newer dynamo exporter
needs onnxscript, which is not a dependency of the converter.
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from converters.errors import ConversionError
from converters.progress import step
from converters.sources import SourceKind, SourceModel, detect_source, first_line, inspect_exported_program

FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
ONNX_OPSET = 17
EXPORT_TOLERANCE = 1e-3
FORCE_WEIGHTS_ONLY = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"
FORCE_NO_WEIGHTS_ONLY = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
# Graph calls that are not operator objects but are safe to run: Python's arithmetic on shapes and indexing.
SAFE_FUNCTIONS = {
    "operator": [
        *("getitem", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "abs"),
        *("eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "not_", "lshift", "rshift"),
    ],
    "math": ["ceil", "floor", "trunc", "sqrt"],
    "torch": ["sym_int", "sym_float", "sym_ite", "sym_max", "sym_min", "sym_not", "sym_sqrt", "sym_sum"],
}


def open_model(model: Path, input_shape: tuple[int, ...] | None, scratch: Path) -> tuple[SourceModel, str]:
    """The model to convert and how the report names it; a PyTorch model is first exported to ONNX."""
    if is_factory_spec(str(model)):
        return export_factory(str(model), input_shape, scratch)
    source = detect_source(model)
    if source.kind is SourceKind.TORCHSCRIPT:
        return export_torchscript(source.path, input_shape, scratch)
    if source.kind is SourceKind.EXPORTED_PROGRAM:
        return export_program(source.path, input_shape, scratch)
    if input_shape is not None:
        raise ConversionError(
            "--input-shape is for PyTorch models given as package.module:factory, a TorchScript file "
            "or a torch.export program"
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


def export_program(path: Path, input_shape: tuple[int, ...] | None, scratch: Path) -> tuple[SourceModel, str]:
    """The torch.export program at `path` exported to ONNX under `scratch`, at the input shape it records."""
    inspect_exported_program(path)
    program = _load_program(path)
    require_operators_only(program, path)
    shape = _program_input_shape(program, path, input_shape)
    module = program.module(check_guards=False)  # guards would be traced into the ONNX graph as constants
    for submodule in module.modules():  # its eval() refuses to run; the graph was fixed when it was exported
        submodule.training = False
    dest = scratch / f"{path.stem}.onnx"
    return _export_module(module, f"pytorch exported program {path}", shape, dest, keep_mode=True)


def _load_program(path: Path) -> Any:
    import torch

    failure = _FirstLoggedError()
    export_log = logging.getLogger("torch.export")
    export_log.addFilter(failure)
    try:
        with _weights_only_loads():
            return torch.export.load(str(path))
    except pickle.UnpicklingError:
        raise ConversionError(
            f"{path}: torch.export.load found pickled data that only loads with weights_only=False (so it could run "
            "code from the file); refusing it"
        ) from None
    except Exception as error:
        cause = failure.error or error
        raise ConversionError(f"torch.export.load cannot read {path}: {first_line(cause)}") from None
    finally:
        export_log.removeFilter(failure)


class _FirstLoggedError(logging.Filter):
    """torch.export.load logs why the archive failed, traceback and all, then retries it as an older format
    whose failure hides the cause; this keeps the first cause for the error message and drops the log."""

    def __init__(self) -> None:
        super().__init__()
        self.error: BaseException | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and self.error is None:
            self.error = record.exc_info[1]
        return False


@contextmanager
def _weights_only_loads() -> Iterator[None]:
    """Every torch.load in this block uses the weights-only unpickler, whatever weights_only it is called with."""
    saved = {name: os.environ.pop(name, None) for name in (FORCE_WEIGHTS_ONLY, FORCE_NO_WEIGHTS_ONLY)}
    os.environ[FORCE_WEIGHTS_ONLY] = "1"
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def require_operators_only(program: Any, path: Path) -> None:
    """The deserializer resolves a node's target, and an operator argument, as any attribute path under torch
    (`torch.os.system` included), so each call, and each callable handed to one, must be a PyTorch operator."""
    import torch

    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            for call in _callables(node):
                if not _is_operator(call):
                    raise ConversionError(
                        f"{path}: graph node {node.name} calls {call!r}, which is not a PyTorch operator; "
                        "refusing to run it"
                    )


def _callables(node: Any) -> list[Any]:
    import torch

    if node.op in ("call_module", "call_method"):
        return [node.target]
    found = [node.target] if node.op == "call_function" else []
    for leaf in torch.utils._pytree.tree_leaves((node.args, node.kwargs)):
        if callable(leaf) and not isinstance(leaf, torch.fx.Node):
            found.append(leaf)
    return found


def _is_operator(target: Any) -> bool:
    import math
    import operator

    import torch

    if isinstance(target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        return True
    modules = {"operator": operator, "math": math, "torch": torch}
    return any(target is getattr(modules[module], name) for module, names in SAFE_FUNCTIONS.items() for name in names)


def _program_input_shape(program: Any, path: Path, input_shape: tuple[int, ...] | None) -> tuple[int, ...]:
    """The shape the program's one tensor input was exported with; --input-shape only fills dynamic dimensions."""
    name, recorded = _recorded_input(program, path)
    shown = "[" + ", ".join("?" if dim is None else str(dim) for dim in recorded) + "]"
    if input_shape is None:
        if None in recorded:
            raise ConversionError(
                f"{path}: input {name} has dynamic dimensions {shown}; give --input-shape, e.g. 1,3,224,224"
            )
        return tuple(dim for dim in recorded if dim is not None)
    fits = len(input_shape) == len(recorded) and all(r in (None, d) for r, d in zip(recorded, input_shape, strict=True))
    if not fits:
        raise ConversionError(
            f"--input-shape {list(input_shape)} does not match the input shape {shown} recorded in {path}"
        )
    return _checked_shape(str(path), input_shape)


def _recorded_input(program: Any, path: Path) -> tuple[str, list[int | None]]:
    """The name and dimensions (None where dynamic) of the program's only input, which must be a float32 tensor."""
    import torch

    names = [str(name) for name in program.graph_signature.user_inputs]
    if len(names) != 1:
        raise ConversionError(
            f"{path}: the exported program takes {len(names)} inputs ({', '.join(names) or 'none'}); "
            "the converter exports models with one tensor input"
        )
    node = next(node for node in program.graph.nodes if node.op == "placeholder" and node.name == names[0])
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
        kind = f"a {value.dtype} tensor" if isinstance(value, torch.Tensor) else type(value).__name__
        raise ConversionError(f"{path}: input {names[0]} is {kind}; the converter exports float32 inputs")
    return names[0], [dim if isinstance(dim, int) else None for dim in value.shape]


def _checked_shape(label: str, input_shape: tuple[int, ...] | None) -> tuple[int, ...]:
    if input_shape is None:
        raise ConversionError(f"{label}: a PyTorch model needs --input-shape, e.g. --input-shape 1,3,224,224")
    if any(d <= 0 for d in input_shape):
        raise ConversionError(f"--input-shape {list(input_shape)}: every dimension must be positive")
    return input_shape


def _export_module(
    module: Any, label: str, input_shape: tuple[int, ...], dest: Path, keep_mode: bool = False
) -> tuple[SourceModel, str]:
    """`module` exported to `dest` and checked against ONNX Runtime on one random input; `label` names it.

    The exporter puts the module in eval mode, unless `keep_mode` (for modules whose train() refuses to run)."""
    import torch

    mode = torch.onnx.TrainingMode.PRESERVE if keep_mode else torch.onnx.TrainingMode.EVAL
    example = torch.from_numpy(np.random.default_rng(0).standard_normal(input_shape).astype(np.float32))
    step(f"exporting {label} to ONNX (opset {ONNX_OPSET}, input {list(input_shape)})")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.filterwarnings("ignore", "no signature found for <torch.ScriptMethod", UserWarning)
            warnings.filterwarnings("ignore", "It is recommended that constant folding be turned off", UserWarning)
            torch.onnx.export(
                module,
                (example,),
                str(dest),
                input_names=["input"],
                opset_version=ONNX_OPSET,
                training=mode,
                dynamo=False,
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
