"""The manifest's description of the model: input specs from the model, YAML and flags; labels; decoder."""

from __future__ import annotations

from pathlib import Path

import pytest

from converters.describe import InputFlags, build_input_specs, model_tensors
from converters.errors import ConversionError
from converters.sources import detect_source
from edge_runtime.backends.base import TensorSpec
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.package.maker import parse_decoder, parse_labels, parse_task
from edge_runtime.package.manifest import Task

IMAGE = TensorSpec("image", (None, 3, 224, 224), "float32")


def test_specs_come_from_the_model_with_a_dynamic_batch_pinned(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from model_builders import build_tiny_classifier_onnx

    path = build_tiny_classifier_onnx(tmp_path / "dynamic.onnx", batch="N")
    inputs, outputs = model_tensors(detect_source(path))
    assert inputs[0].shape == (None, 3, 32, 32) and outputs[0].name == "probabilities"
    (spec,) = build_input_specs(inputs, None, InputFlags())
    assert spec.shape == (1, 3, 32, 32) and spec.layout == "NCHW" and spec.dtype == "float32"


def test_flags_fill_the_spec() -> None:
    flags = InputFlags(color_order="RGB", mean=(123.7, 116.3, 103.5), std=(58.4, 57.1, 57.4), resize="crop")
    (spec,) = build_input_specs([IMAGE], None, flags)
    assert (spec.color_order, spec.resize, spec.mean) == ("RGB", "crop", (123.7, 116.3, 103.5))
    (spec,) = build_input_specs([IMAGE], None, InputFlags(resize="letterbox", pad_value=(114,)))
    assert spec.pad_values == (114,)


def test_yaml_then_flags(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text("shape: [1, 224, 224, 3]\nlayout: NHWC\nmean: [127.5]\nstd: [127.5]\n")
    (spec,) = build_input_specs([IMAGE], tmp_path / "spec.yaml", InputFlags(std=(1.0,)))
    assert spec.shape == (1, 224, 224, 3) and spec.layout == "NHWC"
    assert spec.mean == (127.5,) and spec.std == (1.0,)


def test_invalid_spec_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match=r"inputs\[0\]: mean has 2 values but the input has 3 channels"):
        build_input_specs([IMAGE], None, InputFlags(mean=(1.0, 2.0)))
    (tmp_path / "spec.yaml").write_text("shape: [1, 3, 224, 224]\nmeen: [0]\n")
    with pytest.raises(ConversionError, match=r"inputs\[0\]\.meen: unknown field"):
        build_input_specs([IMAGE], tmp_path / "spec.yaml", InputFlags())


def test_dynamic_spatial_dims_need_a_shape() -> None:
    tensor = TensorSpec("image", (None, 3, None, None), "float32")
    with pytest.raises(ConversionError, match=r"'image' has shape \[\?, 3, \?, \?\].*--input-spec"):
        build_input_specs([tensor], None, InputFlags())


def test_flags_need_a_single_input() -> None:
    second = TensorSpec("extra", (1, 4), "float32")
    with pytest.raises(ConversionError, match="describe one input, the model has 2"):
        build_input_specs([IMAGE, second], None, InputFlags(layout="NCHW"))


def test_labels_from_file_or_list(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_text("cat\n\ndog\n")
    assert parse_labels(str(tmp_path / "labels.txt")) == ("cat", "dog")
    assert parse_labels("a, b,c") == ("a", "b", "c")
    assert parse_task(None, labelled=True) is Task.CLASSIFICATION
    assert parse_task(None, labelled=False) is Task.RAW
    assert parse_task("detection", labelled=True) is Task.DETECTION
    with pytest.raises(EdgeRuntimeError, match="--task 'clasification' is not a task"):
        parse_task("clasification", labelled=False)


def test_decoder_is_checked_by_the_runtime() -> None:
    spec = parse_decoder("classification", '{"top_k": 3}', ("a", "b", "c", "d"))
    assert spec is not None and spec.params == {"top_k": 3}
    with pytest.raises(EdgeRuntimeError, match="unknown decoder 'nope'"):
        parse_decoder("nope", None, ())
    with pytest.raises(EdgeRuntimeError, match="--decoder-params is not valid JSON"):
        parse_decoder("classification", "{top_k: 3}", ())
