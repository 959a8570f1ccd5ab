"""Opening model packages and bare model files, with integrity checks.

A package is a directory holding `model.yaml` and the variants' files. A bare `.tflite`, `.xml` or
`.onnx` file is treated as a package of one variant whose manifest is inferred: task `raw`, inputs
and outputs read from the model when it is loaded. Every file of a package variant is checked
against its sha256 before it is handed to a backend, so a truncated copy or a swapped file is refused
instead of producing plausible garbage.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from edge_runtime.backends.base import ModelSource
from edge_runtime.errors import EdgeRuntimeError, ModelIntegrityError
from edge_runtime.package.manifest import (
    MANIFEST_NAME,
    MODEL_SUFFIXES,
    SCHEMA_VERSION,
    Manifest,
    Precision,
    Variant,
    VariantFile,
    read_manifest,
)

_CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def companion_files(model_file: Path) -> list[Path]:
    """The files a model file needs beside it: OpenVINO IR keeps its weights in a .bin next to the .xml."""
    if model_file.suffix == ".xml":
        weights = model_file.with_suffix(".bin")
        return [weights] if weights.exists() else []
    return []


@dataclass(frozen=True)
class ModelPackage:
    root: Path
    manifest: Manifest
    bare_file: bool = False

    @property
    def name(self) -> str:
        return self.manifest.name

    def variant(self, variant_id: str) -> Variant:
        try:
            return self.manifest.variants[variant_id]
        except KeyError:
            known = ", ".join(self.manifest.variants)
            raise EdgeRuntimeError(f"model {self.name} has no variant {variant_id!r} (it has: {known})") from None

    def source(self, variant_id: str) -> ModelSource:
        """The variant as a loadable source, after checking that every file matches its sha256."""
        variant = self.variant(variant_id)
        for entry in variant.files:
            self._verify(entry, variant_id)
        return ModelSource(
            path=self.root / variant.model_file,
            format=variant.format,
            precision=variant.precision,
            variant_id=variant_id,
            sha256=variant.files[0].sha256,
            target=variant.target,
        )

    def verify_files(self) -> None:
        """Check every file of every variant against its sha256, as loading checks the variant it loads.

        A signature covers the files only through the checksums in `model.yaml`, so verifying a signed
        package has to check them all, not only the variant this box would pick.
        """
        for variant_id, variant in self.manifest.variants.items():
            for entry in variant.files:
                self._verify(entry, variant_id)

    def _verify(self, entry: VariantFile, variant_id: str) -> None:
        path = self.root / entry.path
        if not path.is_file():
            raise ModelIntegrityError(f"model {self.name} variant {variant_id}: file {path} is missing")
        actual = sha256_of(path)
        if actual != entry.sha256:
            raise ModelIntegrityError(
                f"model {self.name} variant {variant_id}: {path} has sha256 {actual}, "
                f"the manifest says {entry.sha256}; the file is corrupt or was replaced, refusing to load it"
            )


def open_package(path: Path | str) -> ModelPackage:
    """Open a package directory (or its model.yaml) or a bare model file."""
    path = Path(path)
    if path.is_dir():
        return ModelPackage(root=path, manifest=read_manifest(path / MANIFEST_NAME))
    if path.name == MANIFEST_NAME:
        return ModelPackage(root=path.parent, manifest=read_manifest(path))
    if not path.exists():
        raise EdgeRuntimeError(f"model not found: {path}")
    if path.suffix not in MODEL_SUFFIXES:
        suffixes = ", ".join(MODEL_SUFFIXES)
        raise EdgeRuntimeError(f"{path} is neither a model package directory nor a model file ({suffixes})")
    return ModelPackage(root=path.parent, manifest=manifest_for_bare_file(path), bare_file=True)


def manifest_for_bare_file(path: Path) -> Manifest:
    """A one-variant manifest for a bare model file; inputs are read from the model when it loads.

    The precision is taken as fp32 unless the file name says otherwise (`*_int8.tflite`,
    `*_fp16.xml`, the converters' naming); the backend reports the precision it really runs at.
    """
    model_format = MODEL_SUFFIXES[path.suffix]
    precision = next((p for p in Precision if p.value in path.stem.lower().split("_")), Precision.FP32)
    files = [VariantFile(path=path.name, sha256=sha256_of(path))]
    files += [VariantFile(path=f.name, sha256=sha256_of(f)) for f in companion_files(path)]
    variant = Variant(
        format=model_format,
        precision=precision,
        files=tuple(files),
        target="edgetpu" if path.stem.endswith("_edgetpu") else None,
    )
    return Manifest(
        schema_version=SCHEMA_VERSION,
        name=path.stem,
        variants={f"{model_format.value}/{precision.value}": variant},
    )
