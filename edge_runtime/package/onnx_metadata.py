"""The `metadata_props` of an ONNX file, read without the onnx package.

An exporter's description of its model (Ultralytics writes task, class names and input size there) is all
a box needs from the file besides what its backend reads, and the onnx package with its protobuf runtime
is not among a box's dependencies. ModelProto keeps `metadata_props` as top-level field 14, a repeated
StringStringEntryProto (`key` = 1, `value` = 2); every other top-level field, the graph with its weights
included, is skipped by its length without being read into memory.
"""

from __future__ import annotations

import mmap
from pathlib import Path

from edge_runtime.errors import EdgeRuntimeError

__all__ = ["read_metadata_props"]

_METADATA_PROPS = 14
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


class _Reader:
    def __init__(self, data: bytes | mmap.mmap, start: int, end: int, path: Path) -> None:
        self.data, self.position, self.end, self.path = data, start, end, path

    def varint(self) -> int:
        value, shift = 0, 0
        while True:
            if self.position >= self.end or shift > 63:
                raise EdgeRuntimeError(f"{self.path}: not an ONNX model (a protobuf number runs past its end)")
            byte = self.data[self.position]
            self.position += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def fields(self) -> list[tuple[int, int, int, int]]:
        """(field number, wire type, start, end) of each field up to `end`; values are not read."""
        found = []
        while self.position < self.end:
            key = self.varint()
            number, wire = key >> 3, key & 7
            if wire == _VARINT:
                start = self.position
                self.varint()
            elif wire in (_FIXED64, _FIXED32):
                start = self.position
                self.position += 8 if wire == _FIXED64 else 4
            elif wire == _LENGTH_DELIMITED:
                length = self.varint()
                start = self.position
                self.position += length
            else:
                raise EdgeRuntimeError(f"{self.path}: not an ONNX model (protobuf wire type {wire})")
            if self.position > self.end or number == 0:
                raise EdgeRuntimeError(f"{self.path}: not an ONNX model (a protobuf field runs past its end)")
            found.append((number, wire, start, self.position))
        return found


def read_metadata_props(path: Path) -> dict[str, str]:
    """The model's `metadata_props` as a dict (empty when it has none); raises when it is no protobuf."""
    with path.open("rb") as file:
        size = path.stat().st_size
        if size == 0:
            raise EdgeRuntimeError(f"{path}: the file is empty, not an ONNX model")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            props: dict[str, str] = {}
            for number, wire, start, end in _Reader(data, 0, size, path).fields():
                if number != _METADATA_PROPS or wire != _LENGTH_DELIMITED:
                    continue
                entry = {
                    n: data[s:e] for n, w, s, e in _Reader(data, start, end, path).fields() if w == _LENGTH_DELIMITED
                }
                try:
                    props[entry.get(1, b"").decode()] = entry.get(2, b"").decode()
                except UnicodeDecodeError:
                    raise EdgeRuntimeError(f"{path}: a metadata_props entry is not UTF-8 text") from None
            return props
