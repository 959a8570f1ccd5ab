"""Small ONNX models shaped and labelled as Ultralytics' exporter writes them (ultralytics/engine/exporter.py).

The exporter stores `str()` of each metadata value in ONNX `metadata_props` (so `names` is a dict literal and
`imgsz` a list literal) and writes the same dict with `yaml.safe_dump` to `metadata.yaml` beside an OpenVINO
IR. Outputs per task: detect `output0` [1, 4 + classes, anchors]; segment adds 32 mask coefficients per
anchor and a prototype output `output1` [1, 32, h/4, w/4]; pose has `4 + 1 + keypoints * 3` rows; classify
[1, classes] probabilities after a softmax.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

NAMES = {0: "person", 1: "bicycle", 2: "car"}
MASK_COEFFICIENTS = 32


def ultralytics_metadata(task: str, imgsz: list[int], names: dict[int, str] | None = None) -> dict[str, Any]:
    """The exporter's `self.metadata`, as Python values."""
    metadata: dict[str, Any] = {
        "description": "Ultralytics YOLOv8n model trained on coco.yaml",
        "author": "Ultralytics",
        "date": "2025-01-01T12:00:00.000000",
        "version": "8.3.0",
        "license": "AGPL-3.0 License (https://ultralytics.com/license)",
        "docs": "https://docs.ultralytics.com",
        "stride": 32,
        "task": task,
        "batch": 1,
        "imgsz": imgsz,
        "names": NAMES if names is None else names,
        "args": {"batch": 1, "half": False, "dynamic": False, "simplify": True, "opset": None, "nms": False},
        "channels": 3,
    }
    if task == "pose":
        metadata["kpt_shape"] = [17, 3]
    return metadata


def build_ultralytics_onnx(
    path: Path,
    task: str = "detect",
    imgsz: tuple[int, int] = (64, 64),
    metadata: dict[str, Any] | None = None,
    dynamic: bool = False,
) -> Path:
    """An export of `task` with the head's output layout; weights are random, the shapes are Ultralytics'."""
    height, width = imgsz
    classes = len(NAMES)
    rows = {
        "detect": 4 + classes,
        "segment": 4 + classes + MASK_COEFFICIENTS,
        "pose": 4 + 1 + 17 * 3,
        "classify": classes,
    }[task]
    rng = np.random.default_rng(0)
    weights = {"head_w": rng.normal(0, 0.2, (rows, 3, 8, 8)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["images", "head_w"], ["features"], strides=[8, 8])]
    batch: int | str = "batch" if dynamic else 1
    size: list[int | str] = ["height", "width"] if dynamic else [height, width]
    if task == "classify":
        nodes += [
            helper.make_node("GlobalAveragePool", ["features"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["output0"], axis=1),
        ]
        outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [batch, classes])]
    else:
        weights["shape"] = np.asarray([0, rows, -1], np.int64)
        nodes += [
            helper.make_node("Reshape", ["features", "shape"], ["flat"]),
            helper.make_node("Sigmoid", ["flat"], ["output0"]),
        ]
        anchors: int | str = "anchors" if dynamic else (height // 8) * (width // 8)
        outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [batch, rows, anchors])]
    if task == "segment":
        weights["proto_w"] = rng.normal(0, 0.2, (MASK_COEFFICIENTS, 3, 4, 4)).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["images", "proto_w"], ["output1"], strides=[4, 4]))
        proto = ["mask_height", "mask_width"] if dynamic else [height // 4, width // 4]
        outputs.append(helper.make_tensor_value_info("output1", TensorProto.FLOAT, [batch, MASK_COEFFICIENTS, *proto]))
    graph = helper.make_graph(
        nodes,
        "main_graph",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, *size])],
        outputs,
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    values = ultralytics_metadata(task, [height, width]) if metadata is None else metadata
    for key, value in values.items():
        prop = model.metadata_props.add()
        prop.key, prop.value = key, str(value)
    onnx.save(model, path)
    return path


def write_openvino_metadata(folder: Path, metadata: dict[str, Any]) -> Path:
    """`metadata.yaml` as the exporter's YAML.save writes it beside the IR."""
    path = folder / "metadata.yaml"
    path.write_text(yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path
