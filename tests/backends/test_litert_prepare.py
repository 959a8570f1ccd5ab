"""LiteRT delegates that load but cannot prepare a model hand it to the next delegate.

LiteRT's XNNPACK cannot prepare int8 weights stored sparse (the converter's EXPERIMENTAL_SPARSITY on
a full-integer model, which adds DENSIFY ops): the model here is a small classifier trained on
scikit-learn's digits, pruned and converted by TensorFlow the way the converter builds
`tflite/sparse_int8`, so the failure and the fallback are LiteRT's own.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np
import pytest

from edge_runtime.backends.base import ModelSource
from edge_runtime.backends.litert.backend import LiteRtBackend, LiteRtOptions
from edge_runtime.errors import ModelLoadError
from edge_runtime.package.manifest import ModelFormat, Precision

PRUNED = 0.7  # share of each layer's weights set to zero, well above where the converter stores them sparse
XNNPACK_REFUSAL = "delegate xnnpack could not prepare the model"


@dataclass(frozen=True)
class SparseModels:
    static: Path  # batch of 1, as the converter exports Keras models
    dynamic: Path  # batch left open, as a SavedModel exported by hand has it
    inputs: np.ndarray  # (N, 8, 8, 1) float32 digits
    expected: np.ndarray  # (N, 10) the Keras model's probabilities


def source_for(path: Path) -> ModelSource:
    return ModelSource(path, ModelFormat.TFLITE, Precision.INT8, "tflite/sparse_int8", "sha")


def _prune(model: Any) -> None:
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            kernel = weights[0]
            kernel[np.abs(kernel) < np.quantile(np.abs(kernel), PRUNED)] = 0.0
            layer.set_weights([kernel, *weights[1:]])


def _sparse_int8(model: Any, samples: np.ndarray) -> bytes:
    import tensorflow as tf

    def representative() -> Any:
        for sample in samples:
            yield [sample[np.newaxis]]

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT, tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    return bytes(converter.convert())


@pytest.fixture(scope="module")
def sparse(tmp_path_factory: pytest.TempPathFactory) -> SparseModels:
    from sklearn.datasets import load_digits
    from tensorflow import keras

    folder = tmp_path_factory.mktemp("sparse_int8")
    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[..., None]
    keras.utils.set_random_seed(0)

    def classifier(batch: int | None) -> Any:
        return keras.Sequential(
            [
                keras.Input((8, 8, 1), batch_size=batch),
                keras.layers.Flatten(),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )

    model = classifier(None)
    model.compile(keras.optimizers.Adam(3e-3), "sparse_categorical_crossentropy")
    model.fit(x, data.target, epochs=5, batch_size=64, verbose=0)
    _prune(model)
    fixed = classifier(1)
    fixed.set_weights(model.get_weights())
    (folder / "static.tflite").write_bytes(_sparse_int8(fixed, x[:100]))
    (folder / "dynamic.tflite").write_bytes(_sparse_int8(model, x[:100]))
    held = x[1500:]
    return SparseModels(folder / "static.tflite", folder / "dynamic.tflite", held, model.predict(held, verbose=0))


def quantize(backend: LiteRtBackend, images: np.ndarray) -> list[np.ndarray]:
    """Each image as the model's int8 input, with the scale and zero point the model carries."""
    quantization = backend.inputs[0].quantization
    assert quantization is not None
    scaled = np.round(images / quantization.scale) + quantization.zero_point
    return [row[np.newaxis] for row in np.clip(scaled, -128, 127).astype(np.int8)]


def classify(backend: LiteRtBackend, images: np.ndarray) -> np.ndarray:
    """Probabilities for each image, dequantized with the output's own parameters."""
    quantization = backend.outputs[0].quantization
    assert quantization is not None
    scores = np.concatenate([backend.infer([image])[0] for image in quantize(backend, images)])
    return (scores.astype(np.float32) - quantization.zero_point) * quantization.scale


def assert_matches_keras(probabilities: np.ndarray, expected: np.ndarray) -> None:
    """Within int8 quantization error of the float model, and picking the same digit almost always."""
    assert np.abs(probabilities - expected).max() < 0.1
    agreement = (probabilities.argmax(axis=1) == expected.argmax(axis=1)).mean()
    assert agreement >= 0.97, agreement


@pytest.mark.parametrize("shape", ["static", "dynamic"])
def test_model_xnnpack_cannot_prepare_runs_on_the_builtin_kernels(
    sparse: SparseModels, shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = sparse.static if shape == "static" else sparse.dynamic
    with caplog.at_level(logging.WARNING, logger="edge_runtime.backends.litert.backend"):
        backend = LiteRtBackend(source_for(path), LiteRtOptions(threads=2))
    runs_on = backend.runs_on
    assert (runs_on.device, runs_on.precision, runs_on.details["delegate"]) == ("cpu", "int8", "none")
    fallback = runs_on.details["fallback"]
    assert fallback.startswith(XNNPACK_REFUSAL)
    assert "TfLiteXNNPackDelegate" in fallback and "failed to prepare" in fallback  # LiteRT's own reason
    logged = [record.getMessage() for record in caplog.records]
    assert any(path.name in message and XNNPACK_REFUSAL in message for message in logged), logged
    assert_matches_keras(classify(backend, sparse.inputs), sparse.expected)
    backend.close()


def test_builtin_kernels_asked_for_directly_need_no_fallback(sparse: SparseModels) -> None:
    backend = LiteRtBackend(source_for(sparse.static), LiteRtOptions(delegate="none"))
    assert backend.runs_on.details["delegate"] == "none"
    assert "fallback" not in backend.runs_on.details
    assert_matches_keras(classify(backend, sparse.inputs[:100]), sparse.expected[:100])


def test_without_fallback_the_prepare_failure_is_a_load_error_naming_the_file(sparse: SparseModels) -> None:
    with pytest.raises(ModelLoadError) as raised:
        LiteRtBackend(source_for(sparse.static), LiteRtOptions(fallback=[]))
    message = str(raised.value)
    assert str(sparse.static) in message and XNNPACK_REFUSAL in message and "failed to prepare" in message


def test_a_failed_delegate_then_xnnpack_then_the_builtin_kernels(sparse: SparseModels, tmp_path: Path) -> None:
    missing = str(tmp_path / "no_such_delegate.so")
    options = LiteRtOptions(delegate="external", delegate_library=missing)
    backend = LiteRtBackend(source_for(sparse.static), options)
    failures = backend.runs_on.details["fallback"].split("; ")
    assert len(failures) == 2
    assert failures[0].startswith(f"delegate external ({missing}) failed:")
    assert failures[1].startswith(XNNPACK_REFUSAL)
    assert backend.runs_on.details["delegate"] == "none"


def test_async_interpreters_use_the_delegate_that_prepared_the_model(sparse: SparseModels) -> None:
    backend = LiteRtBackend(source_for(sparse.static), LiteRtOptions(threads=2))
    images = quantize(backend, sparse.inputs[:12])
    expected = [backend.infer([image]) for image in images]
    results: dict[int, Any] = {}
    lock = threading.Lock()

    def on_result(userdata: Any, outputs: list[np.ndarray] | None, error: BaseException | None) -> None:
        with lock:
            results[userdata] = outputs if error is None else error

    runner = backend.async_runner(on_result, max_in_flight=2)
    for i, image in enumerate(images):
        runner.submit([image], userdata=i)
    runner.close()
    for i, outputs in enumerate(expected):
        np.testing.assert_array_equal(results[i][0], outputs[0])


def mismatched_add(path: Path) -> Path:
    """ADD of a [1, 4] and a [1, 3] tensor: a valid file that no kernel can prepare."""
    from ai_edge_litert import schema_py_generated as schema

    def tensor(name: str, width: int) -> Any:
        t = schema.TensorT()
        t.name, t.type, t.buffer, t.shape = name, schema.TensorType.FLOAT32, 0, [1, width]
        return t

    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.ADD
    code.version = 1
    operator = schema.OperatorT()
    operator.opcodeIndex, operator.inputs, operator.outputs = 0, [0, 1], [2]
    operator.builtinOptionsType, operator.builtinOptions = schema.BuiltinOptions.AddOptions, schema.AddOptionsT()
    graph = schema.SubGraphT()
    graph.tensors = [tensor("a", 4), tensor("b", 3), tensor("sum", 4)]
    graph.inputs, graph.outputs, graph.operators = [0, 1], [2], [operator]
    model = schema.ModelT()
    model.version, model.operatorCodes, model.subgraphs, model.buffers = 3, [code], [graph], [schema.BufferT()]
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path.write_bytes(builder.Output())
    return path


def test_a_model_no_delegate_can_prepare_is_a_load_error_naming_the_file(tmp_path: Path) -> None:
    path = mismatched_add(tmp_path / "mismatched_add.tflite")
    with pytest.raises(ModelLoadError) as raised:
        LiteRtBackend(source_for(path), LiteRtOptions())
    message = str(raised.value)
    assert message.startswith(f"LiteRT cannot prepare {path}: ")
    assert XNNPACK_REFUSAL in message
    assert "the built-in kernels (delegate none) could not prepare the model" in message
    assert "not broadcastable. Node number 0 (ADD) failed to prepare" in message  # the kernel's own reason
