"""Work a conversion need not do twice: the reference's outputs and the int8 quantizations, kept on disk.

Converting the same model again (other variants, another threshold, a larger recovery budget) repeats
the slowest parts unchanged: running the fp32 reference over the evaluation set, and NNCF's statistics
collection and bias correction for each int8 quantization, recovery's attempts included. Both are
functions of the source model's bytes, the preprocessed samples' bytes and the settings, so they are
kept under a key that is the sha256 of exactly those (plus the versions of the libraries that computed
them): a changed model, sample, flag or library is a different key, never a stale answer.

The cache lives in `$XDG_CACHE_HOME/edge-convert` (else `~/.cache/edge-convert`), or `--cache-dir`; its
folders are made readable by their owner only, since a cached model is loaded as the conversion's own.
An accuracy control cut short by the time budget went as far as the machine got in that time: it is
kept under the budget as well, so that only a conversion with the same budget reuses it. Entries are
written to a temporary name and renamed, so an interrupted write leaves no entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from converters.calibration import Sample
from converters.metrics import RunOutputs
from converters.progress import log

__all__ = ["BuildCache", "ConversionCache", "default_cache_dir", "samples_digest", "source_digest"]

_FORMAT = 2  # bump when what an entry holds, or how it is computed, changes


def default_cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "edge-convert"


def source_digest(path: Path) -> str:
    """sha256 of a model file, or of a folder's files (a SavedModel) with their relative paths."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(file.relative_to(path).as_posix().encode() if path.is_dir() else b"")
        with file.open("rb") as stream:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def samples_digest(samples: Sequence[Sample], extra: Iterable[Any] = ()) -> str:
    """sha256 of preprocessed samples as the model is fed them (dtype, shape and bytes), and of `extra`."""
    digest = hashlib.sha256()
    for sample in samples:
        for array in sample:
            contiguous = np.ascontiguousarray(array)
            digest.update(f"{contiguous.dtype.str}{contiguous.shape}".encode())
            digest.update(contiguous.tobytes())
    for item in extra:
        digest.update(repr(item).encode())
    return digest.hexdigest()


def _versions() -> dict[str, str]:
    found = {}
    for package in ("openvino", "nncf", "onnxruntime", "ai-edge-litert", "tensorflow"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found


@dataclass(frozen=True)
class ConversionCache:
    root: Path

    def key(self, kind: str, **parts: Any) -> str:
        """The entry's name: a sha256 of what the cached result is a function of."""
        described = json.dumps({"format": _FORMAT, "kind": kind, "versions": _versions(), **parts}, sort_keys=True)
        return f"{kind}-{hashlib.sha256(described.encode()).hexdigest()[:40]}"

    def _folder(self) -> Path:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self.root

    def reference(
        self, key: str, compute: Callable[[], tuple[RunOutputs, str, list[str]]]
    ) -> tuple[RunOutputs, str, list[str]]:
        """The reference's outputs, label and the warnings running it gave, under `key`; computed (and kept) when
        not cached yet."""
        entry = self.root / key
        if (entry / "outputs.npz").is_file():
            try:
                described = json.loads((entry / "entry.json").read_text(encoding="utf-8"))
                label, names = str(described["label"]), [str(name) for name in described["names"]]
                warnings = [str(warning) for warning in described["warnings"]]
                with np.load(entry / "outputs.npz", allow_pickle=False) as data:
                    arrays = [data[f"arr_{i}"] for i in range(len(names))]
                log.info("reference outputs from the cache (%s)", entry)
                return RunOutputs(names, arrays), label, warnings
            except (OSError, KeyError, ValueError, TypeError) as error:
                log.debug("cache entry %s unreadable (%s): computing again", entry, error)
        outputs, label, warnings = compute()
        with self._writing(key) as folder:
            np.savez(folder / "outputs.npz", *outputs.arrays)  # arr_0, arr_1, ... in output order
            described = {"label": label, "names": outputs.names, "warnings": warnings}
            (folder / "entry.json").write_text(json.dumps(described), encoding="utf-8")
        return outputs, label, warnings

    def value(self, key: str, compute: Callable[[], list[str]]) -> list[str]:
        """A list of names under `key`, computed (and kept) when not cached yet."""
        entry = self.root / key / "entry.json"
        if entry.is_file():
            try:
                found = json.loads(entry.read_text(encoding="utf-8"))["value"]
                if isinstance(found, list) and all(isinstance(item, str) for item in found):
                    return found
            except (OSError, KeyError, ValueError, TypeError) as error:
                log.debug("cache entry %s unreadable (%s): computing again", entry, error)
        computed = compute()
        with self._writing(key) as folder:
            (folder / "entry.json").write_text(json.dumps({"value": computed}), encoding="utf-8")
        return computed

    def files(self, key: str) -> Path | None:
        """The folder of a cached build under `key`, when there is one."""
        entry = self.root / key
        return entry if (entry / "entry.json").is_file() else None

    def keep_files(self, key: str, root: Path, files: Sequence[str], notes: Sequence[str]) -> None:
        """Keep a build's `files` (relative to `root`) and its report notes under `key`."""
        with self._writing(key) as folder:
            for name in files:
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / name, folder / name)
            entry = {"files": list(files), "notes": list(notes)}
            (folder / "entry.json").write_text(json.dumps(entry), encoding="utf-8")

    class _Writing:
        def __init__(self, cache: ConversionCache, key: str) -> None:
            self.target = cache._folder() / key
            self.temporary = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=self.target.parent))

        def __enter__(self) -> Path:
            return self.temporary

        def __exit__(self, kind: object, error: object, trace: object) -> None:
            if kind is None and not self.target.exists():
                try:
                    self.temporary.rename(self.target)
                    return
                except OSError as failed:  # another conversion wrote it meanwhile: theirs is as good
                    log.debug("cache entry %s not kept: %s", self.target, failed)
            shutil.rmtree(self.temporary, ignore_errors=True)

    def _writing(self, key: str) -> ConversionCache._Writing:
        return ConversionCache._Writing(self, key)


@dataclass
class BuildCache:
    """Builds of one source model in `store`: what a builder's output is a function of, hashed into its key."""

    store: ConversionCache
    source: str  # sha256 of the model the variants are built from
    _digests: dict[int, tuple[Sequence[Sample], str]] = field(default_factory=dict)

    def data(self, samples: Sequence[Sample]) -> str:
        """sha256 of a list of samples, once per list in a run: hashing 300 images takes a while.

        The memo holds the list itself, so that its id cannot be reused by another list while remembered.
        """
        if id(samples) not in self._digests:
            self._digests[id(samples)] = (samples, samples_digest(samples))
        return self._digests[id(samples)][1]

    def key(self, variant_id: str, settings: Any, calibration: str, **more: Any) -> str:
        described = {k: v for k, v in asdict(settings).items() if k != "recovery_seconds"}
        return self.store.key(
            "build", variant=variant_id, source=self.source, settings=described, data=calibration, **more
        )

    def restore(self, key: str, out_dir: Path) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """The cached build's files copied into `out_dir`, and its notes; None when not cached or unreadable."""
        entry = self.store.files(key)
        if entry is None:
            return None
        try:
            described = json.loads((entry / "entry.json").read_text(encoding="utf-8"))
            files = tuple(str(name) for name in described["files"])
            for name in files:
                if Path(name).is_absolute() or ".." in Path(name).parts:
                    raise ValueError(f"file {name!r} outside the entry")
                (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(entry / name, out_dir / name)
            return files, tuple(str(note) for note in described["notes"])
        except (OSError, KeyError, ValueError, TypeError) as error:
            log.debug("cache entry %s unreadable (%s): building again", entry, error)
            return None
