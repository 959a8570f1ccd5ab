"""A model package as one tar archive, packed reproducibly and unpacked without trusting the archive.

Unpacking reads the archive twice. The first pass looks only at the headers and refuses an archive
whose members could write outside the staging directory (an absolute path, `..`, a link, a device
or fifo) or that is over the file-count or size limits, before anything is written. The second pass
writes regular files and directories only, into a fresh directory inside the staging directory,
with their own modes rather than the archive's, counting the bytes it really writes.

Headers alone are not trusted: every byte read from the (decompressed) stream is counted against a
cap derived from the limits, so a compression bomb or an oversized header stops early, and data left
after what the headers declare (a member longer than its header says, which tarfile would otherwise
skip silently) is refused, and so is a member with the setuid or setgid bit (unpacking drops modes, so
such a file could only be a mistake or a probe). A write that fails (a full disk) is this box's fault,
not the archive's, and is said so, naming the directory. On any refusal or failure the directory being
unpacked into is removed, leaving the staging directory as it was.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO

from edge_runtime.errors import ArchiveRefused, EdgeRuntimeError

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_FILES", "pack", "unpack"]

DEFAULT_MAX_BYTES = 4 << 30
DEFAULT_MAX_FILES = 1000
# What a member may take in the stream beyond its data: a header, a long-name or pax header, padding.
_HEADER_ALLOWANCE = 4096
_TRAILER_ALLOWANCE = 1 << 20
_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


def pack(root: Path, archive_path: Path) -> Path:
    """Write the package at `root` as a tar (gzip-compressed when the name ends in .gz or .tgz).

    The same files give the same archive: members sorted, owners, times and modes normalised, so
    two builds of a package can be compared by their checksum. Links and special files are refused:
    unpacking would refuse them anyway.
    """
    members = sorted(_package_members(root))
    compress = archive_path.name.endswith((".gz", ".tgz"))
    with archive_path.open("wb") as raw:
        stream: io.BufferedIOBase = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if compress else raw
        try:
            with tarfile.open(fileobj=stream, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for relative in members:
                    path = root / relative
                    info = tarfile.TarInfo(relative)
                    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                    if path.is_dir():
                        info.type, info.mode = tarfile.DIRTYPE, 0o755
                        tar.addfile(info)
                        continue
                    info.size, info.mode = path.stat().st_size, 0o644
                    with path.open("rb") as data:
                        tar.addfile(info, data)
        finally:
            if compress:
                stream.close()
    return archive_path


def _package_members(root: Path) -> Iterator[str]:
    if not root.is_dir():
        raise EdgeRuntimeError(f"{root} is not a package directory")
    for path in root.rglob("*"):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise EdgeRuntimeError(f"{root}: {relative} is a link or a special file; a package holds files only")
        yield relative


class _CappedReader(io.RawIOBase):
    """Reads a stream, refusing it once more than `cap` bytes came through, and remembers where its
    last non-zero byte was: data after the end the tar headers declare must be zero padding."""

    def __init__(self, stream: io.BufferedIOBase, cap: int, archive: str) -> None:
        self.stream = stream
        self.cap = cap
        self.archive = archive
        self.position = 0
        self.data_end = 0  # one past the last non-zero byte read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self.stream.read(len(buffer))
        if self.position + len(data) > self.cap:
            reason = f"the archive holds more than the {self.cap} bytes its limits allow"
            raise ArchiveRefused(self.archive, None, reason)
        buffer[: len(data)] = data
        stripped = len(data.rstrip(b"\0"))
        if stripped:
            self.data_end = self.position + stripped
        self.position += len(data)
        return len(data)

    def drain(self) -> None:
        while self.read(_CHUNK):
            pass


def _open_stream(archive_path: Path, cap: int) -> tuple[IO[bytes], _CappedReader]:
    raw = archive_path.open("rb")
    compressed = raw.read(2) == _GZIP_MAGIC
    raw.seek(0)
    source: io.BufferedIOBase = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
    return raw, _CappedReader(source, cap, str(archive_path))


def _checked_name(archive: str, member: tarfile.TarInfo) -> PurePosixPath:
    """The member's path inside the package, or ArchiveRefused for anything that is not a plain file or folder
    at a relative path inside the package."""
    name = member.name
    if member.issym() or member.islnk():
        kind = "symbolic link" if member.issym() else "hard link"
        raise ArchiveRefused(archive, name, f"is a {kind} (to {member.linkname!r}); a package holds no links")
    if member.ischr() or member.isblk() or member.isfifo():
        raise ArchiveRefused(archive, name, "is a device or fifo; a package holds files and folders only")
    if not (member.isreg() or member.isdir()) or member.issparse():
        raise ArchiveRefused(archive, name, "is not a regular file or a folder")
    if member.mode & (stat.S_ISUID | stat.S_ISGID):
        reason = f"has mode {member.mode:04o}, with the setuid or setgid bit; a package holds no such files"
        raise ArchiveRefused(archive, name, reason)
    if not name or "\0" in name or "\\" in name:
        raise ArchiveRefused(archive, name, "has an empty or unusable name")
    path = PurePosixPath(name)
    if path.is_absolute():
        raise ArchiveRefused(archive, name, "has an absolute path; members must stay inside the package")
    if ".." in path.parts:
        raise ArchiveRefused(archive, name, "has '..' in its path; members must stay inside the package")
    parts = [part for part in path.parts if part != "."]
    if not parts and not member.isdir():
        raise ArchiveRefused(archive, name, "is a file where the package's root folder should be")
    return PurePosixPath(*parts)  # PurePosixPath(".") for the root folder entry `tar -C dir -cf x.tar .` writes


def _check_headers(archive_path: Path, cap: int, max_bytes: int, max_files: int) -> None:
    """The first pass: every header checked, nothing written."""
    archive = str(archive_path)
    raw, stream = _open_stream(archive_path, cap)
    with raw, tarfile.open(fileobj=stream, mode="r|") as tar:
        declared, seen = 0, set()
        for count, member in enumerate(tar, start=1):
            if count > max_files:
                raise ArchiveRefused(archive, member.name, f"the archive has more than {max_files} members")
            path = _checked_name(archive, member)
            if path in seen:
                raise ArchiveRefused(archive, member.name, "appears twice in the archive")
            seen.add(path)
            declared += member.size if member.isreg() else 0
            if declared > max_bytes:
                raise ArchiveRefused(archive, member.name, f"the files add up to more than {max_bytes} bytes")
        end = tar.offset
        stream.drain()
    if stream.data_end > end:
        raise ArchiveRefused(archive, None, f"{stream.data_end - end} bytes follow what the tar headers declare")


def unpack(
    archive_path: Path, staging_dir: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, max_files: int = DEFAULT_MAX_FILES
) -> Path:
    """Unpack the archive into a new directory inside `staging_dir` and return that directory.

    Raises ArchiveRefused for an unsafe or malformed archive; nothing is then left behind in
    `staging_dir`, and nothing is ever written outside it.
    """
    archive = str(archive_path)
    cap = max_bytes + (max_files + 2) * _HEADER_ALLOWANCE + _TRAILER_ALLOWANCE
    if archive_path.stat().st_size > cap:
        raise ArchiveRefused(archive, None, f"the archive file is larger than the {cap} bytes its limits allow")
    try:
        _check_headers(archive_path, cap, max_bytes, max_files)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
        raise ArchiveRefused(archive, None, f"not a readable tar archive: {error}") from None
    try:
        staging_dir.mkdir(parents=True, exist_ok=True)
        target = Path(tempfile.mkdtemp(prefix="unpack-", dir=staging_dir))
    except OSError as error:
        raise _unwritable(archive, staging_dir, error) from None
    try:
        _extract(archive_path, target, cap, max_bytes, max_files)
    except EdgeRuntimeError:
        shutil.rmtree(target)
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
        shutil.rmtree(target)
        raise ArchiveRefused(archive, None, f"not a readable tar archive: {error}") from None
    return target


def _extract(archive_path: Path, target: Path, cap: int, max_bytes: int, max_files: int) -> None:
    """The second pass: the archive is read again, as it may have changed since the first, and checked again."""
    archive = str(archive_path)
    written = 0
    raw, stream = _open_stream(archive_path, cap)
    with raw, tarfile.open(fileobj=stream, mode="r|") as tar:
        for count, member in enumerate(tar, start=1):
            if count > max_files:
                raise ArchiveRefused(archive, member.name, f"the archive has more than {max_files} members")
            relative = _checked_name(archive, member)
            destination = target.joinpath(*relative.parts)
            if member.isdir():
                destination.mkdir(mode=0o755, parents=True, exist_ok=True)
                continue
            source = tar.extractfile(member)
            if source is None:
                raise ArchiveRefused(archive, member.name, "has no data to read")
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            try:
                destination.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                out = os.fdopen(os.open(destination, flags, 0o644), "wb")
            except OSError as error:
                raise _unwritable(archive, target.parent, error) from None
            with out:
                while chunk := source.read(_CHUNK):  # reading is the archive's part: its errors are the archive's
                    written += len(chunk)
                    if written > max_bytes:
                        raise ArchiveRefused(archive, member.name, f"the files add up to more than {max_bytes} bytes")
                    try:
                        out.write(chunk)
                        out.flush()
                    except OSError as error:
                        raise _unwritable(archive, target.parent, error) from None


def _unwritable(archive: str, directory: Path, error: OSError) -> EdgeRuntimeError:
    """A failure of this box's disk, not of the archive: said as such, naming the directory."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return EdgeRuntimeError(f"cannot unpack {archive}: the disk holding {directory} is full ({error.strerror})")
    return EdgeRuntimeError(f"cannot unpack {archive} into {directory}: {error.strerror or error}")
