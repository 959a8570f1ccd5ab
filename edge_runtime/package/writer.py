"""Writing model packages: records each variant file's sha256 and size in the manifest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edge_runtime.package.loader import sha256_of
from edge_runtime.package.manifest import (
    MANIFEST_NAME,
    SCHEMA_VERSION,
    Manifest,
    ModelFormat,
    Precision,
    Variant,
    VariantFile,
    dump_manifest,
)


def describe_variant(
    root: Path,
    files: Sequence[str],
    model_format: ModelFormat,
    precision: Precision,
    **fields: Any,
) -> Variant:
    """A variant entry for files already written under `root`, with their checksums and total size."""
    entries = tuple(VariantFile(path=f, sha256=sha256_of(root / f)) for f in files)
    size = sum((root / f).stat().st_size for f in files)
    return Variant(format=model_format, precision=precision, files=entries, size_bytes=size, **fields)


def write_package(root: Path, variants: Mapping[str, Variant], **manifest_fields: Any) -> Manifest:
    """Validate and write `model.yaml` for the variants under `root`; returns the manifest written."""
    manifest = Manifest(schema_version=SCHEMA_VERSION, variants=dict(variants), **manifest_fields)
    (root / MANIFEST_NAME).write_text(dump_manifest(manifest), encoding="utf-8")
    return manifest
