from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from edge_runtime.errors import ManifestError
from edge_runtime.package.manifest import dump_manifest, parse_manifest, read_manifest

SHA = "0" * 64


def valid_manifest() -> dict[str, Any]:
    return {
        "schema_version": 1,
        "name": "net",
        "task": "classification",
        "inputs": [{"shape": [1, 3, 32, 32], "layout": "NCHW", "mean": [0.5, 0.5, 0.5], "std": [0.2]}],
        "labels": ["a", "b"],
        "variants": {
            "onnx/fp32": {"format": "onnx", "precision": "fp32", "files": [{"path": "m.onnx", "sha256": SHA}]}
        },
    }


def test_valid_manifest_round_trips_through_yaml() -> None:
    manifest = parse_manifest(valid_manifest(), "model.yaml")
    again = parse_manifest(yaml.safe_load(dump_manifest(manifest)), "model.yaml")
    assert again == manifest
    assert manifest.inputs[0].channels == 3
    assert manifest.inputs[0].spatial_size == (32, 32)


def test_pad_value_is_one_value_or_one_per_channel_and_black_when_absent() -> None:
    def spec(pad_value: Any) -> Any:
        data = valid_manifest()
        if pad_value is not None:
            data["inputs"][0]["pad_value"] = pad_value
        manifest = parse_manifest(data, "model.yaml")
        assert parse_manifest(yaml.safe_load(dump_manifest(manifest)), "model.yaml") == manifest
        return manifest.inputs[0]

    assert spec(None).pad_values == (0,) and "pad_value" not in dump_manifest(parse_manifest(valid_manifest(), "m"))
    assert spec(114).pad_values == (114,)
    assert spec([124, 116, 104]).pad_values == (124, 116, 104)


_DELETE = object()


def _broken(path: str, value: Any) -> dict[str, Any]:
    """A copy of the valid manifest with the dotted `path` set to `value` (or removed)."""
    data = copy.deepcopy(valid_manifest())
    *parents, leaf = path.split(".")
    node: Any = data
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is _DELETE:
        del node[leaf]
    else:
        node[int(leaf) if leaf.isdigit() else leaf] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("colour", "RGB", "colour: unknown field"),
        ("inputs.0.layuot", "NHWC", "inputs[0].layuot: unknown field"),
        ("schema_version", 7, "schema_version: unsupported schema_version 7"),
        ("name", _DELETE, "name: Field required"),
        ("task", "counting", "task: Input should be"),
        ("inputs.0.shape", [1, 0, 32, 32], "inputs[0].shape: every dimension must be positive"),
        ("inputs.0.mean", [0.5, 0.5], "inputs[0]: mean has 2 values but the input has 3 channels"),
        ("inputs.0.std", [0.0], "inputs[0]: std must not contain zero"),
        ("inputs.0.pad_value", [114, 114], "inputs[0]: pad_value has 2 values but the input has 3 channels"),
        ("inputs.0.pad_value", [], "inputs[0]: pad_value needs one value, or one per channel"),
        ("inputs.0.pad_value", 256, "inputs[0].pad_value[0]: Input should be less than or equal to 255"),
        ("variants", {}, "variants: Dictionary should have at least 1 item"),
        ("variants.onnx/fp32.precision", "int4", "variants.onnx/fp32.precision: Input should be"),
        (
            "variants.onnx/fp32.files.0.sha256",
            "abc",
            "variants.onnx/fp32.files[0].sha256: String should match",
        ),
        ("variants.onnx/fp32.files.0.path", "../m.onnx", "must be a relative path inside the package"),
        ("variants.onnx/fp32.format", "tflite", "is not a tflite model file"),
        (
            "variants.onnx/fp32.sparsity",
            1.5,
            "variants.onnx/fp32.sparsity: Input should be less than or equal",
        ),
        (
            "variants.onnx/fp32.accuracy",
            {"drop_points": 0.5, "drop_threshold": -1.0},
            "variants.onnx/fp32.accuracy: drop_threshold must not be negative, got -1.0",
        ),
        ("variants.onnx/fp32.accuracy", {"top1": "high"}, "variants.onnx/fp32.accuracy.top1: Input should be"),
    ],
)
def test_each_schema_problem_names_its_field(path: str, value: Any, expected: str) -> None:
    data = _broken(path, value)
    with pytest.raises(ManifestError) as error:
        parse_manifest(data, "pkg/model.yaml")
    assert "pkg/model.yaml" in str(error.value)
    assert any(expected in problem for problem in error.value.problems), error.value.problems


def test_variant_id_must_name_format_and_variant() -> None:
    data = valid_manifest()
    data["variants"] = {"fp32": data["variants"]["onnx/fp32"]}
    with pytest.raises(ManifestError, match="must look like 'format/name'"):
        parse_manifest(data, "model.yaml")


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read"):
        read_manifest(tmp_path / "model.yaml")
    (tmp_path / "model.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ManifestError, match="not valid YAML"):
        read_manifest(tmp_path / "model.yaml")
    (tmp_path / "model.yaml").write_text("- just\n- a list\n")
    with pytest.raises(ManifestError, match="expected a mapping"):
        read_manifest(tmp_path / "model.yaml")


@pytest.mark.parametrize(
    ("accuracy", "too_large", "described"),
    [
        ({}, None, None),
        ({"top1": 0.9}, None, None),
        (
            {"top1": 0.9, "top1_agreement_vs_fp32": 0.95, "drop_points": 3.2, "drop_threshold": 1.0},
            True,
            "lost 3.2 points of top-1 in conversion (threshold 1.0)",
        ),
        (
            {"map50": 0.41, "top1_agreement_vs_fp32": 0.9, "drop_points": 0.5, "drop_threshold": 0.25},
            True,
            "lost 0.5 points of mAP@0.5 in conversion (threshold 0.25)",
        ),
        (
            {"top1_agreement_vs_fp32": 0.98, "drop_points": 2.0, "drop_threshold": 2.0},
            False,
            "changed the predicted class of 2.0% of samples in conversion (threshold 2.0)",
        ),
        (
            {"cosine_vs_fp32": 0.999, "drop_points": 1.25},
            True,
            "moved its outputs by 1.25% of their range in conversion "
            "(threshold 1.0, edge-convert's default: the manifest records none)",
        ),
    ],
)
def test_accuracy_drop_reads_what_the_converter_measured(
    accuracy: dict[str, float], too_large: bool | None, described: str | None
) -> None:
    data = valid_manifest()
    data["variants"]["onnx/fp32"]["accuracy"] = accuracy
    drop = parse_manifest(data, "model.yaml").variants["onnx/fp32"].accuracy_drop
    if too_large is None:
        assert drop is None
        return
    assert drop is not None and drop.too_large is too_large and drop.describe() == described
