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
torch.export programs (.pt2) are read once their archive is inspected, before torch opens it, because
`torch.export.load` lets the file decide how each part is read: a weight or constant its JSON config marks
as pickled goes through `torch.load(weights_only=False)`, an opaque constant through `pickle.loads`, a
compiled AOTInductor model is loaded as a shared library, and older archives keep whole state dicts as
pickles. An archive holding any of these is refused; what is left is the graph as JSON, weights and
constants as raw bytes, extra text files, and the example inputs, a torch.save file that the loader
reads with `weights_only=True` and retries with False, which `converters.pytorch_source` forces back to
True. The graph is then checked to call only PyTorch operators before it runs.
"""

from __future__ import annotations

import json
import re
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
    EXPORTED_PROGRAM = "exported_program"

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
    "(torch.jit.script(model).save('model.pt')) or as a torch.export program "
    "(torch.export.save(torch.export.export(model, (example,)), 'model.pt2')), or name the code that builds it, "
    "package.module:factory, with --input-shape; save Keras models as .keras files, which this converter reads"
)
# What torch.export.load reads without unpickling (torch/export/pt2_archive/_package.py, load_pt2), relative to
# the archive's root folder: the format markers, the graph as JSON, weights and tensor constants as raw bytes
# described by JSON configs, extra/ files read as text, and the example inputs (loaded weights-only).
_PT2_READ_SAFELY = re.compile(
    r"archive_format|archive_version|byteorder|\.data/[\w.]+|models/\w+\.json|extra/.+"
    r"|data/weights/\w+_weights_config\.json|data/weights/weight_\d+"
    r"|data/constants/\w+_constants_config\.json|data/constants/tensor_\d+|data/sample_inputs/\w+\.pt"
)
_PT2_UNSAFE = {
    r"data/aotinductor/": "AOTInductor compiled code, which torch.export.load loads as a shared library",
    r"data/constants/opaque_obj_": "an opaque constant object, which torch.export.load reads with pickle.loads",
    r"data/constants/custom_obj_": "a TorchScript custom-class constant, unpickled by torch.export.load and not "
    "exportable to ONNX",
    r"data/(weights|constants)/\w+\.pt$": "a state dict saved with torch.save (an older archive), which "
    "torch.export.load reads as a pickle",
}
# The JSON configs that describe weights and constants, and the file names their payloads must have.
_PT2_PAYLOADS = {
    re.compile(r"data/weights/\w+_weights_config\.json"): "weight_",
    re.compile(r"data/constants/\w+_constants_config\.json"): "tensor_",
}
# Protocol 2+ pickles start with the PROTO opcode; zip archives with a data.pkl are torch.save files.
_PICKLE_MAGIC = b"\x80"
_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_SCAN_BYTES = 1 << 20  # a checkpoint's pickle names the model's classes near its start, before the tensors


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
        if self.kind is SourceKind.EXPORTED_PROGRAM:
            raise ConversionError(f"{self.label} must first be exported to ONNX")


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
        ir_files = sorted(path.glob("*.xml"))
        if (path / "metadata.yaml").is_file() and len(ir_files) == 1:  # an Ultralytics OpenVINO export folder
            return detect_source(ir_files[0])
        raise ConversionError(
            f"{path} is a directory without saved_model.pb; give a model file (.onnx, .xml, .tflite, .keras) "
            "or a TensorFlow SavedModel folder"
        )
    suffix = path.suffix.lower()
    if _exported_program_root(path) is not None:
        inspect_exported_program(path)
        return SourceModel(path=path, kind=SourceKind.EXPORTED_PROGRAM)
    if _is_torchscript(path):
        return SourceModel(path=path, kind=SourceKind.TORCHSCRIPT)
    if suffix in PICKLE_SUFFIXES or _is_pickle(path):
        raise ConversionError(_pickle_refusal(path))
    if suffix == ".pt2":
        raise ConversionError(f"{path} is not a torch.export archive (it has no archive_format entry reading pt2)")
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
    if _names_ultralytics(path):
        onnx_file = path.with_suffix(".onnx")
        return (
            f"{path} is an Ultralytics checkpoint, a Python pickle; refusing to load it, because unpickling runs "
            f"arbitrary code from the file. Export it to ONNX with Ultralytics: `yolo export model={path} "
            f"format=onnx` writes {onnx_file}, and `edge-convert {onnx_file} -o PACKAGE` converts that in one "
            "command (task, labels, input size and letterbox come from the export's metadata)"
        )
    return (
        f"{path} is a Python pickle (torch.save / pickle / joblib); refusing to load it, because unpickling "
        f"runs arbitrary code from the file; {HOW_TO_EXPORT}"
    )


def _names_ultralytics(path: Path) -> bool:
    """Whether the pickle names Ultralytics' classes (ultralytics.nn.tasks.DetectionModel, ...), found by reading its
    bytes, never by unpickling them: torch.save zips hold the pickle in data.pkl, older files are the pickle."""
    marker = b"ultralytics"
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [name for name in archive.namelist() if name.endswith("data.pkl")]
            return any(marker in archive.read(name) for name in pickles)
    except zipfile.BadZipFile:
        with path.open("rb") as stream:
            return marker in stream.read(_PICKLE_SCAN_BYTES)


def _exported_program_root(path: Path) -> str | None:
    """The root folder of a torch.export archive (the folder holding archive_format = pt2), else None."""
    names = _zip_names(path)
    root = names[0].split("/")[0] if names else ""
    if f"{root}/archive_format" not in names:
        return None
    with zipfile.ZipFile(path) as archive:
        return root if archive.read(f"{root}/archive_format") == b"pt2" else None


def inspect_exported_program(path: Path) -> None:
    """Refuse a torch.export archive holding anything torch.export.load would unpickle or run when loading it."""
    root = _exported_program_root(path)
    if root is None:
        raise ConversionError(f"{path} is not a torch.export archive (it has no archive_format entry reading pt2)")
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        for name in names:
            entry = name.removeprefix(f"{root}/")
            if name == entry or not _PT2_READ_SAFELY.fullmatch(entry):
                raise ConversionError(_exported_program_refusal(path, f"{name} holds {_unsafe_reason(entry)}"))
        for name in names:
            for config, payload_prefix in _PT2_PAYLOADS.items():
                if config.fullmatch(name.removeprefix(f"{root}/")):
                    _check_payload_config(path, name, archive.read(name), payload_prefix)


def _unsafe_reason(entry: str) -> str:
    for pattern, reason in _PT2_UNSAFE.items():
        if re.match(pattern, entry):
            return reason
    return "an entry that is not part of a torch.export program"


def _check_payload_config(path: Path, name: str, content: bytes, payload_prefix: str) -> None:
    """Each weight or constant must be raw tensor bytes: `use_pickle` means torch.load(weights_only=False), and a
    constant's file name picks its reader (opaque_obj_ files go to pickle.loads)."""
    try:
        config = json.loads(content)["config"]
        items = [(str(fqn), meta["use_pickle"], str(meta["path_name"])) for fqn, meta in config.items()]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ConversionError(f"{path}: {name} is not a torch.export weights or constants config") from None
    for fqn, use_pickle, path_name in items:
        if use_pickle is not False:
            what = f"{name} marks {fqn} as pickled ({path_name}), which torch.export.load reads with weights_only=False"
            raise ConversionError(_exported_program_refusal(path, what))
        if not re.fullmatch(rf"{payload_prefix}\d+", path_name):
            what = f"{name} stores {fqn} in {path_name}, which torch.export.load would not read as raw tensor bytes"
            raise ConversionError(_exported_program_refusal(path, what))


def _exported_program_refusal(path: Path, what: str) -> str:
    return (
        f"{path} is a torch.export program, and its {what}; refusing to load it, because that runs "
        f"code from the file (torch.export.save writes plain tensors as raw bytes, so this comes from tensor "
        f"subclasses, custom objects, compiled code or an old PyTorch); {HOW_TO_EXPORT}"
    )
