"""The backend registry: one record per backend, which everything else reads."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from edge_runtime.backends import BACKENDS, BackendKey, backend_class, backend_for_format, load_backend
from edge_runtime.backends.base import ModelSource
from edge_runtime.errors import ConfigError, UnknownNameError
from edge_runtime.package.manifest import ModelFormat, Precision


def test_the_config_literal_names_exactly_the_registered_backends() -> None:
    assert get_args(BackendKey) == tuple(BACKENDS)


@pytest.mark.parametrize("key", list(BACKENDS))
def test_each_record_names_its_backend_class_and_agrees_with_itself(key: str) -> None:
    record = BACKENDS[key]
    assert record.key == key
    assert backend_class(key).key == key
    assert record.native_format in record.formats
    assert {pattern.split("/")[0] for pattern in record.default_variants} <= {f.value for f in record.formats}


def test_every_format_has_exactly_one_backend_of_its_own() -> None:
    owners = {model_format: backend_for_format(model_format) for model_format in ModelFormat}
    assert owners == {ModelFormat.OPENVINO: "openvino", ModelFormat.TFLITE: "litert", ModelFormat.ONNX: "onnxruntime"}


def test_an_unknown_backend_names_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown backend 'tensorrt'; known: openvino, litert, onnxruntime"):
        backend_class("tensorrt")


def test_a_format_the_backend_does_not_load_is_refused_before_loading() -> None:
    source = ModelSource(Path("model.xml"), ModelFormat.OPENVINO, Precision.FP32, "openvino/fp32", "")
    with pytest.raises(ConfigError, match=r"backend litert cannot load openvino models \(it loads: tflite\)"):
        load_backend("litert", source)
