"""Package archives: reproducible packing, and unpacking that refuses whatever could escape the staging folder."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from edge_runtime.errors import ArchiveRefused
from edge_runtime.package.archive import pack, unpack
from edge_runtime.package.signing import read_public_key, verify_package

Member = Callable[[tarfile.TarFile], None]


def file_member(name: str, data: bytes = b"weights") -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    return add


def special_member(name: str, kind: bytes, linkname: str = "") -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.devmajor, info.devminor = kind, linkname, 1, 3
        tar.addfile(info)

    return add


def write_tar(path: Path, *members: Member) -> Path:
    with tarfile.open(path, "w") as tar:
        for add in members:
            add(tar)
    return path


def everything_under(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def refused(archive: Path, tmp_path: Path, **limits: int) -> ArchiveRefused:
    """Unpack `archive` into <tmp>/staging, expecting a refusal that leaves every folder as it was."""
    staging = tmp_path / "staging"
    staging.mkdir(exist_ok=True)
    before = everything_under(tmp_path)
    with pytest.raises(ArchiveRefused) as caught:
        unpack(archive, staging, **limits)
    assert everything_under(tmp_path) == before
    assert list(staging.iterdir()) == []
    assert caught.value.archive == str(archive)
    return caught.value


def test_a_packed_package_unpacks_and_still_verifies(
    signed_package: Path, keys: tuple[Path, Path], tmp_path: Path, now: datetime
) -> None:
    archive = pack(signed_package, tmp_path / "face.tar.gz")
    unpacked = unpack(archive, tmp_path / "staging")
    assert unpacked.parent == tmp_path / "staging"
    assert verify_package(unpacked, [read_public_key(keys[1])], now=now + timedelta(days=1)).release == 5
    assert (unpacked / "tflite" / "fp32" / "model.tflite").read_bytes() == (
        signed_package / "tflite" / "fp32" / "model.tflite"
    ).read_bytes()


def test_packing_is_reproducible(package: Path, tmp_path: Path) -> None:
    first = pack(package, tmp_path / "first.tar.gz").read_bytes()
    (package / "model.yaml").touch()  # a newer time changes nothing
    assert pack(package, tmp_path / "second.tar.gz").read_bytes() == first


def test_an_absolute_path_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "evil.txt"
    error = refused(write_tar(tmp_path / "a.tar", file_member(str(target))), tmp_path)
    assert (error.member, error.reason) == (str(target), "has an absolute path; members must stay inside the package")
    assert not target.exists()


def test_a_path_climbing_out_with_dot_dot_is_refused(tmp_path: Path) -> None:
    error = refused(write_tar(tmp_path / "a.tar", file_member("model.yaml"), file_member("../../escape.txt")), tmp_path)
    assert (error.member, error.reason) == (
        "../../escape.txt",
        "has '..' in its path; members must stay inside the package",
    )
    assert not (tmp_path / "escape.txt").exists()


def test_a_symlink_and_a_file_written_through_it_are_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    archive = write_tar(
        tmp_path / "a.tar", special_member("link", tarfile.SYMTYPE, str(outside)), file_member("link/evil.txt")
    )
    error = refused(archive, tmp_path)
    assert error.member == "link"
    assert error.reason == f"is a symbolic link (to {str(outside)!r}); a package holds no links"
    assert list(outside.iterdir()) == []


def test_a_hard_link_is_refused(tmp_path: Path) -> None:
    error = refused(write_tar(tmp_path / "a.tar", special_member("passwd", tarfile.LNKTYPE, "/etc/passwd")), tmp_path)
    assert error.reason == "is a hard link (to '/etc/passwd'); a package holds no links"


@pytest.mark.parametrize("kind", [tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE])
def test_devices_and_fifos_are_refused(kind: bytes, tmp_path: Path) -> None:
    error = refused(write_tar(tmp_path / "a.tar", special_member("null", kind)), tmp_path)
    assert (error.member, error.reason) == ("null", "is a device or fifo; a package holds files and folders only")


def test_too_many_members_are_refused(tmp_path: Path) -> None:
    archive = write_tar(tmp_path / "a.tar", *(file_member(f"f{i}") for i in range(5)))
    error = refused(archive, tmp_path, max_files=4)
    assert (error.member, error.reason) == ("f4", "the archive has more than 4 members")


def test_files_adding_up_to_more_than_the_limit_are_refused(tmp_path: Path) -> None:
    archive = write_tar(tmp_path / "a.tar", file_member("a.bin", b"x" * 600), file_member("b.bin", b"y" * 600))
    error = refused(archive, tmp_path, max_bytes=1000)
    assert (error.member, error.reason) == ("b.bin", "the files add up to more than 1000 bytes")


def test_a_member_longer_than_its_header_says_is_refused(tmp_path: Path) -> None:
    info = tarfile.TarInfo("model.onnx")
    info.size = 10
    archive = tmp_path / "long.tar"
    archive.write_bytes(info.tobuf(tarfile.USTAR_FORMAT) + b"A" * 2048 + b"\0" * 1024)
    error = refused(archive, tmp_path)
    assert (error.member, error.reason) == (None, "1536 bytes follow what the tar headers declare")


def test_a_compressed_stream_larger_than_the_limits_allow_is_refused(tmp_path: Path) -> None:
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w") as tar:
        file_member("model.yaml", b"small")(tar)
    archive = tmp_path / "bomb.tar.gz"
    archive.write_bytes(gzip.compress(plain.getvalue() + b"\0" * (4 << 20)))
    assert archive.stat().st_size < 10_000
    error = refused(archive, tmp_path, max_bytes=1000, max_files=10)
    assert error.reason.startswith("the archive holds more than the ")


def test_a_member_twice_is_refused(tmp_path: Path) -> None:
    error = refused(write_tar(tmp_path / "a.tar", file_member("model.yaml"), file_member("./model.yaml")), tmp_path)
    assert error.reason == "appears twice in the archive"


def test_garbage_is_not_an_archive(tmp_path: Path) -> None:
    archive = tmp_path / "junk.tar"
    archive.write_bytes(b"not a tar archive at all" * 40)
    assert refused(archive, tmp_path).reason.startswith("not a readable tar archive: ")


def test_an_archive_made_with_tar_dash_c_dot_unpacks(package: Path, tmp_path: Path) -> None:
    archive = tmp_path / "face.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(package, arcname=".")
    unpacked = unpack(archive, tmp_path / "staging")
    assert (unpacked / "model.yaml").read_bytes() == (package / "model.yaml").read_bytes()
    assert (unpacked / "openvino" / "fp32" / "model.bin").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o6755], ids=lambda mode: f"{mode:04o}")
def test_a_setuid_or_setgid_member_is_refused(mode: int, tmp_path: Path) -> None:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("tool")
        info.size, info.mode = 4, mode
        tar.addfile(info, io.BytesIO(b"\x7fELF"))

    error = refused(write_tar(tmp_path / "suid.tar", file_member("model.yaml"), add), tmp_path)
    assert error.member == "tool" and f"has mode {mode:04o}, with the setuid or setgid bit" in error.reason


def test_a_write_that_fails_is_the_disk_not_the_archive(package: Path, tmp_path: Path) -> None:
    """Writes past the file size limit fail as writes to a full disk do; the archive is not to blame."""
    archive = pack(package, tmp_path / "face.tar")
    staging = tmp_path / "staging"
    script = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from edge_runtime.errors import ArchiveRefused, EdgeRuntimeError\n"
        "from edge_runtime.package.archive import unpack\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
        "try:\n"
        "    unpack(Path(sys.argv[1]), Path(sys.argv[2]))\n"
        "except ArchiveRefused as error:\n"
        "    print('refused:', error)\n"
        "except EdgeRuntimeError as error:\n"
        "    print('error:', error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(archive), str(staging)], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    assert done.stdout == f"error: cannot unpack {archive} into {staging}: File too large\n", done.stderr
    assert list(staging.iterdir()) == []  # what was written is removed
