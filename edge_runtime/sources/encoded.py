"""Encoded images (JPEG, PNG, BMP, WebP) to frames, sized from their headers before any pixel is decoded.

An image file says how large it is in its first bytes, and a decoder allocates what it says: a 100 KB PNG
declaring 30000×30000 pixels becomes 2.7 GB of BGR pixels, and JPEG and PNG compress a flat picture
that well. So every image that arrives from outside (a request body, a file in a watched folder) is
sized from its header first and refused while still compressed when it declares more than the limit.
OpenCV's own guard (`OPENCV_IO_MAX_IMAGE_PIXELS`, 2^30 pixels by default) is far above what a box can
hold and is read once per process, so it cannot serve as the configured limit.

Only formats whose size can be read here are decoded from untrusted bytes; anything else is refused as
an unknown format rather than handed to a decoder that would size it on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import cv2
import numpy as np

__all__ = ["ImageError", "ImageSize", "declared_size", "decode_image"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG frame headers (SOF0-SOF15 less DHT C4, JPG C8 and DAC CC): they carry the height and width.
_JPEG_FRAME_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_STANDALONE = frozenset([0x01, *range(0xD0, 0xD8)])  # TEM and RST0-7: no length follows


class ImageError(ValueError):
    """An image that is not decoded, and why: `format` (none known here), `size` (more pixels than allowed) or
    `damaged` (a known format the decoder could not read)."""

    def __init__(self, message: str, reason: Literal["format", "size", "damaged"]) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ImageSize:
    format: str
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height


def declared_size(data: bytes | bytearray | memoryview) -> ImageSize | None:
    """The format and size the image's header declares; None when the bytes are no image known here."""
    head = bytes(data[:64])
    if head.startswith(_PNG_SIGNATURE):
        if len(head) < 24 or head[12:16] != b"IHDR":
            return None
        return ImageSize("PNG", int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big"))
    if head.startswith(b"\xff\xd8"):
        return _jpeg_size(data)
    if head.startswith(b"BM") and len(head) >= 26:
        width = int.from_bytes(head[18:22], "little", signed=True)
        height = int.from_bytes(head[22:26], "little", signed=True)  # negative: stored top-down
        return ImageSize("BMP", abs(width), abs(height))
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return _webp_size(head)
    return None


def decode_image(data: bytes | bytearray | memoryview, max_pixels: int, what: str = "the image") -> np.ndarray:
    """The image as a BGR frame; `ImageError` naming `what` and the limit when it is not decoded."""
    size = declared_size(data)
    if size is None:
        raise ImageError(f"{what} is no JPEG, PNG, BMP or WebP image", "format")
    if size.pixels > max_pixels:
        raise ImageError(
            f"{what} declares {size.width}×{size.height} pixels ({size.pixels:,}), over the limit of "
            f"{max_pixels:,} (max_image_pixels); it was not decoded",
            "size",
        )
    frame = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) if size.pixels else None
    if frame is None:
        raise ImageError(f"{what} is a damaged {size.format} image: it cannot be decoded", "damaged")
    return frame


def _jpeg_size(data: bytes | bytearray | memoryview) -> ImageSize | None:
    """Walk the marker segments up to the frame header; None if the scan starts first or the bytes end."""
    view = memoryview(data)
    position, end = 2, len(view)
    while position + 4 <= end:
        if view[position] != 0xFF:
            return None
        marker = view[position + 1]
        if marker == 0xFF:  # fill byte before a marker
            position += 1
            continue
        if marker in _JPEG_STANDALONE:
            position += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, start of scan: no frame header came before
            return None
        length = int.from_bytes(view[position + 2 : position + 4], "big")
        if marker in _JPEG_FRAME_MARKERS:
            if position + 9 > end or length < 7:
                return None
            height = int.from_bytes(view[position + 5 : position + 7], "big")
            width = int.from_bytes(view[position + 7 : position + 9], "big")
            return ImageSize("JPEG", width, height)
        if length < 2:
            return None
        position += 2 + length
    return None


def _webp_size(head: bytes) -> ImageSize | None:
    chunk = head[12:16]
    if chunk == b"VP8 " and len(head) >= 30 and head[23:26] == b"\x9d\x01\x2a":
        width = int.from_bytes(head[26:28], "little") & 0x3FFF
        height = int.from_bytes(head[28:30], "little") & 0x3FFF
        return ImageSize("WebP", width, height)
    if chunk == b"VP8L" and len(head) >= 25 and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], "little")
        return ImageSize("WebP", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X" and len(head) >= 30:
        return ImageSize("WebP", int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1)
    return None
