"""What kind of model the user handed in, and refusing the kinds that are unsafe to open.

Formats are told apart by content as well as by suffix, because a pickle renamed to `.onnx` is still
a pickle: loading a pickle runs whatever code its author put in it, so the converter never loads one.
A format is supported once it has a reader here; the variant builders ask a `SourceModel` for an
OpenVINO model or an ONNX file and never look at the original format themselves.

TorchScript archives are read: `torch.jit.load` compiles the archive's code, kept as TorchScript source
text under code/, and reads its tensors and constants with PyTorch's C++ unpickler, which builds only
TorchScript types and never imports or calls Python objects. The code itself is a program, though: it
runs when the model is exported and may call any PyTorch operator, file reads and writes included, and
PyTorch's security notes say to treat a TorchScript model like executable code from its author. So a
TorchScript file is trusted the way a factory module is: the user is converting code they chose to run.
torch.export programs (.pt2) are refused: `torch.export.load` reads the weights, constants and example
inputs a file marks as pickled with `torch.load(weights_only=False)` or `pickle.loads` (example inputs
fall back to it when the weights-only load fails), so the file decides, and can run any code.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from converters.errors import ConversionError, VariantSkippedError


class SourceKind(str, Enum):
    ONNX = "onnx"
    OPENVINO = "openvino"
    TFLITE = "tflite"
    KERAS = "keras"
    SAVED_MODEL = "saved_model"
    TORCHSCRIPT = "torchscript"

    @property
    def is_tensorflow(self) -> bool:
        return self in (SourceKind.KERAS, SourceKind.SAVED_MODEL)


SUFFIXES = {
    ".onnx": SourceKind.ONNX,
    ".xml": SourceKind.OPENVINO,
    ".tflite": SourceKind.TFLITE,
    ".keras": SourceKind.KERAS,
}
PICKLE_SUFFIXES = frozenset({".pkl", ".pickle", ".joblib", ".pt", ".pth", ".ckpt", ".dill"})
NOT_YET = {
    ".h5": "Keras HDF5 models (load it in Keras and save it with model.save('model.keras'))",
}
HOW_TO_EXPORT = (
    "export the model to ONNX, which holds only the graph and weights, and convert the .onnx file: "
    "torch.onnx.export(model, example, 'model.onnx') for PyTorch; or save it as TorchScript "
    "(torch.jit.script(model).save('model.pt')), or name the code that builds it, package.module:factory, "
    "and give either one --input-shape; save Keras models as .keras files, which this converter reads"
)
# Protocol 2+ pickles start with the PROTO opcode; zip archives with a data.pkl are torch.save files.
_PICKLE_MAGIC = b"\x80"
_ZIP_MAGIC = b"PK\x03\x04"


@dataclass(frozen=True)
class SourceModel:
    path: Path
    kind: SourceKind

    @property
    def label(self) -> str:
        return f"{self.kind.value} model {self.path}"

    def openvino_model(self) -> Any:
        """A fresh `openvino.Model` of the source (each caller may modify its copy)."""
        import openvino as ov

        self._require_exported()
        path = self.path
        if self.kind.is_tensorflow:
            from converters.tensorflow_models import saved_model_dir

            path = saved_model_dir(self)
        try:
            if self.kind is SourceKind.OPENVINO:
                return ov.Core().read_model(str(path))
            return ov.convert_model(str(path))
        except Exception as error:
            raise ConversionError(f"OpenVINO cannot read {self.label}: {first_line(error)}") from None

    def onnx_file(self) -> Path:
        """The source as an ONNX file, for the ONNX Runtime variants."""
        self._require_exported()
        if self.kind is SourceKind.ONNX:
            return self.path
        if self.kind is SourceKind.TFLITE:
            raise VariantSkippedError(
                "ONNX variants from a TFLite model need tf2onnx (python -m tf2onnx.convert --tflite), "
                "which this converter does not run yet; convert the original model to ONNX instead"
            )
        if self.kind.is_tensorflow:
            from converters.tensorflow_models import onnx_export

            return onnx_export(self)
        raise VariantSkippedError("OpenVINO IR cannot be converted back to ONNX; convert from the original ONNX model")

    def _require_exported(self) -> None:
        if self.kind is SourceKind.TORCHSCRIPT:
            raise ConversionError(f"{self.label} must first be exported to ONNX, which needs --input-shape")


def first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def detect_source(path: Path) -> SourceModel:
    """The model at `path`, refusing pickles and naming what to do for formats not read here."""
    if not path.exists():
        raise ConversionError(f"model not found: {path}")
    if path.is_dir():
        if (path / "saved_model.pb").exists():
            return SourceModel(path=path, kind=SourceKind.SAVED_MODEL)
        raise ConversionError(
            f"{path} is a directory without saved_model.pb; give a model file (.onnx, .xml, .tflite, .keras) "
            "or a TensorFlow SavedModel folder"
        )
    suffix = path.suffix.lower()
    if _is_torchscript(path):
        return SourceModel(path=path, kind=SourceKind.TORCHSCRIPT)
    if suffix == ".pt2":
        raise ConversionError(_exported_program_refusal(path))
    if suffix in PICKLE_SUFFIXES or _is_pickle(path):
        raise ConversionError(_pickle_refusal(path))
    if suffix in NOT_YET:
        raise ConversionError(f"{path}: {NOT_YET[suffix]} are not read by this converter yet; {HOW_TO_EXPORT}")
    if suffix not in SUFFIXES:
        known = ", ".join(SUFFIXES)
        raise ConversionError(f"{path}: unknown model format {suffix or '(no suffix)'}; the converter reads {known}")
    if SUFFIXES[suffix] is SourceKind.KERAS and not _zip_names(path):
        raise ConversionError(f"{path} is not a Keras archive (a .keras file is a zip written by model.save)")
    if SUFFIXES[suffix] is SourceKind.OPENVINO and not path.with_suffix(".bin").exists():
        raise ConversionError(f"{path}: the OpenVINO IR weights {path.with_suffix('.bin').name} are missing beside it")
    return SourceModel(path=path, kind=SUFFIXES[suffix])


def _head(path: Path) -> bytes:
    with path.open("rb") as stream:
        return stream.read(4)


def _zip_names(path: Path) -> list[str]:
    if _head(path) != _ZIP_MAGIC:
        return []
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.namelist()
    except zipfile.BadZipFile:
        return []


def _is_torchscript(path: Path) -> bool:
    """torch.jit.save archives, whose code is TorchScript source; torch.save pickles have no code/ folder."""
    return any("/code/" in name or name.endswith("constants.pkl") for name in _zip_names(path))


def _is_pickle(path: Path) -> bool:
    head = _head(path)
    if head[:1] == _PICKLE_MAGIC and len(head) > 1 and 2 <= head[1] <= 5:
        return True
    return any(name.endswith(".pkl") for name in _zip_names(path))


def _pickle_refusal(path: Path) -> str:
    return (
        f"{path} is a Python pickle (torch.save / pickle / joblib); refusing to load it, because unpickling "
        f"runs arbitrary code from the file; {HOW_TO_EXPORT}"
    )


def _exported_program_refusal(path: Path) -> str:
    return (
        f"{path} is a torch.export program; refusing to load it, because torch.export.load unpickles the weights, "
        f"constants and example inputs the file marks as pickled with torch.load(weights_only=False) or "
        f"pickle.loads, which runs arbitrary code from the file; {HOW_TO_EXPORT}"
    )
