"""Ultralytics YOLO exports describe themselves; edge-convert reads that so the user need not type it.

What the metadata says and how it becomes a package's task, labels, input spec and decoder lives with the
packages (`edge_runtime.package.ultralytics`), where `edge-runtime package make` uses it too; this module
hands it the converter's source model and collects its warnings for the report.
"""

from __future__ import annotations

from collections.abc import Sequence

from converters.progress import Warnings, step
from converters.sources import SourceKind, SourceModel
from edge_runtime.backends.base import TensorSpec
from edge_runtime.package.ultralytics import ModelHints, export_hints, read_export_metadata

__all__ = ["ModelHints", "model_hints"]


def model_hints(
    source: SourceModel, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], warnings: Warnings
) -> ModelHints:
    """Hints from an Ultralytics export's metadata, none for other models; what the package cannot use is warned."""
    if source.kind not in (SourceKind.ONNX, SourceKind.OPENVINO):
        return ModelHints()
    found = read_export_metadata(source.path)
    if found is None:
        return ModelHints()
    file, values = found
    hints = export_hints(file, values, inputs, outputs, warnings.add)
    step(f"{file}: Ultralytics export; task, labels, input spec and decoder come from its metadata")
    return hints
