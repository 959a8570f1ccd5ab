"""Hostile images for tests: headers that declare far more pixels than their bytes hold."""

from __future__ import annotations

import struct
import zlib


def png_declaring(width: int, height: int) -> bytes:
    """A valid PNG header declaring `width`×`height` RGB pixels, followed by one compressed row: the shape of a
    decompression bomb (a few hundred bytes that a decoder would allocate width×height×3 bytes for)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    row = zlib.compress(b"\x00" * (1 + 3 * width))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", row) + chunk(b"IEND", b"")
