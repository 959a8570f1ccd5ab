"""Keras and TensorFlow SavedModel sources: one SavedModel that OpenVINO, TFLite, tf2onnx and the reference read.

A `.keras` file is exported once per conversion to a SavedModel in a scratch folder (removed when the
process exits), with a batch of 1 fixed in its signature: OpenVINO, the TFLite converter, tf2onnx and
the Edge TPU compiler then all see the same static graph, and no reader needs Keras's Python classes.
Keras files are loaded in Keras's safe mode, which refuses Lambda layers carrying Python bytecode.

The reference for these sources is the model itself run by TensorFlow, not one of its conversions, so
an error of the TFLite or OpenVINO converter shows up in the fp32 variants instead of being baked into
the yardstick.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from converters.calibration import Sample
from converters.errors import ConversionError, VariantSkippedError
from converters.metrics import RunOutputs
from converters.sources import SourceKind, SourceModel, first_line

SERVING_SIGNATURE = "serving_default"
ONNX_OPSET = 17
TF2ONNX_TIMEOUT_S = 900
_EXPORTS: dict[tuple[str, str, int], Path] = {}


def quiet_tensorflow() -> None:
    """TensorFlow's C++ start-up chatter (oneDNN, CPU features) would bury the converter's own progress lines."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def load_keras(path: Path) -> Any:
    """The Keras model in `path`, loaded without its optimizer and refusing embedded Python code."""
    quiet_tensorflow()
    from tensorflow import keras

    try:
        return keras.models.load_model(str(path), compile=False, safe_mode=True)
    except Exception as error:
        raise ConversionError(
            f"Keras cannot load {path}: {first_line(error)} (custom layers must be registered with "
            "keras.saving.register_keras_serializable and importable; Lambda layers are refused in safe mode)"
        ) from None


def saved_model_dir(source: SourceModel) -> Path:
    """A SavedModel folder for a Keras or SavedModel source; Keras files are exported once and cached."""
    if source.kind is SourceKind.SAVED_MODEL:
        return source.path
    if source.kind is not SourceKind.KERAS:
        raise ValueError(f"{source.label} is not a TensorFlow model")
    key = ("saved_model", str(source.path.resolve()), source.path.stat().st_mtime_ns)
    cached = _EXPORTS.get(key)
    if cached is None or not cached.exists():
        cached = _scratch("keras") / "saved_model"
        export_keras(load_keras(source.path), cached)
        _EXPORTS[key] = cached
    return cached


def onnx_export(source: SourceModel) -> Path:
    """The source's SavedModel converted to ONNX by tf2onnx, once per conversion.

    tf2onnx reads SavedModels only through its command line, which also keeps its TensorFlow graph
    rewrites out of this process.
    """
    if importlib.util.find_spec("tf2onnx") is None:
        raise VariantSkippedError("ONNX variants from a TensorFlow model need tf2onnx: pip install 'tf2onnx>=1.17'")
    saved = saved_model_dir(source)
    key = ("onnx", str(saved.resolve()), (saved / "saved_model.pb").stat().st_mtime_ns)
    cached = _EXPORTS.get(key)
    if cached is not None and cached.exists():
        return cached
    dest = _scratch("onnx") / "model.onnx"
    command = [sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(saved), "--output", str(dest)]
    command += ["--opset", str(ONNX_OPSET)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=TF2ONNX_TIMEOUT_S, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"tf2onnx did not finish within {TF2ONNX_TIMEOUT_S} s") from None
    if result.returncode != 0 or not dest.exists():
        problems = [line for line in result.stderr.splitlines() if "Error" in line or "error" in line]
        raise RuntimeError(f"tf2onnx failed (exit status {result.returncode}): {(problems or ['no output'])[-1]}")
    _EXPORTS[key] = dest
    return dest


def _scratch(kind: str) -> Path:
    """A folder for derived models, removed when the process exits."""
    folder = Path(tempfile.mkdtemp(prefix=f"edge-convert-{kind}-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def export_keras(model: Any, dest: Path) -> None:
    """Export the model's forward pass as a SavedModel whose inputs have a batch of 1."""
    import tensorflow as tf

    specs = [tf.TensorSpec((1, *tensor.shape[1:]), tensor.dtype, name=_input_name(tensor)) for tensor in model.inputs]
    signature = specs if len(specs) == 1 else [specs]
    try:
        model.export(str(dest), format="tf_saved_model", verbose=False, input_signature=signature)
    except Exception as error:
        raise ConversionError(f"cannot export the Keras model to a SavedModel: {first_line(error)}") from None


def _input_name(tensor: Any) -> str:
    return str(tensor.name).split(":")[0]


def load_serving(path: Path) -> Any:
    """The SavedModel's serving signature, the one the TFLite converter converts."""
    quiet_tensorflow()
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as error:
        raise ConversionError(f"TensorFlow cannot load the SavedModel {path}: {first_line(error)}") from None
    if SERVING_SIGNATURE not in loaded.signatures:
        known = ", ".join(loaded.signatures) or "none"
        raise ConversionError(f"SavedModel {path} has no {SERVING_SIGNATURE!r} signature (it has: {known})")
    return loaded


def run_tensorflow(source: SourceModel, samples: Sequence[Sample]) -> tuple[RunOutputs, str]:
    """The source's outputs on the samples, run by TensorFlow itself: the reference for TensorFlow sources."""
    import tensorflow as tf

    loaded = load_serving(saved_model_dir(source))
    function = loaded.signatures[SERVING_SIGNATURE]
    names = list(function.structured_input_signature[1])
    if len(names) != len(samples[0]):
        raise ConversionError(f"{source.label} takes {len(names)} inputs, the samples have {len(samples[0])}")
    collected: dict[str, list[np.ndarray]] = {}
    for sample in samples:
        feed = {name: tf.constant(array) for name, array in zip(names, sample, strict=True)}
        try:
            results = function(**feed)
        except (tf.errors.OpError, ValueError, TypeError) as error:
            shapes = ", ".join(str(list(array.shape)) for array in sample)
            raise ConversionError(
                f"TensorFlow cannot run {source.label} on inputs {shapes}: {_op_error(error)}"
            ) from None
        for key, value in results.items():
            collected.setdefault(key, []).append(np.asarray(value, np.float64))
    outputs = RunOutputs(list(collected), [np.stack(arrays) for arrays in collected.values()])
    return outputs, f"{source.path.name} on TensorFlow {tf.__version__} (CPU, fp32)"


def _op_error(error: Exception) -> str:
    """TensorFlow's messages start with "Graph execution error:" and a stack; the cause is further down."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    causes = [line for line in lines if not line.startswith(("Graph execution error", "Detected at", "<stack", "[["))]
    return causes[0] if causes else first_line(error)


def variable_sparsity(source: SourceModel) -> float:
    """Share of zeros in the model's weight matrices and kernels (variables of two or more dimensions).

    Read from the SavedModel's checkpoint, which every SavedModel has, whether or not its restored
    object lists its variables.
    """
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(saved_model_dir(source) / "variables" / "variables"))
    total = zeros = 0
    for name, shape in reader.get_variable_to_shape_map().items():
        if len(shape) < 2 or "OPTIMIZER_SLOT" in name:
            continue
        values = np.asarray(reader.get_tensor(name))
        if values.dtype.kind == "f":
            total += values.size
            zeros += int(values.size - np.count_nonzero(values))
    return zeros / total if total else 0.0
