"""Encoded images are sized from their headers, and refused while still compressed when they declare too much."""

from __future__ import annotations

import resource
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from image_bombs import png_declaring

from edge_runtime.sources.encoded import ImageError, declared_size, decode_image

PHOTO = Path(__file__).resolve().parents[2] / "samples/images/astronaut.jpg"


@pytest.mark.parametrize(
    ("extension", "params", "format_name"),
    [
        (".jpg", [], "JPEG"),
        (".jpg", [cv2.IMWRITE_JPEG_PROGRESSIVE, 1], "JPEG"),
        (".png", [], "PNG"),
        (".bmp", [], "BMP"),
        (".webp", [cv2.IMWRITE_WEBP_QUALITY, 80], "WebP"),
        (".webp", [cv2.IMWRITE_WEBP_QUALITY, 101], "WebP"),  # lossless
    ],
)
def test_each_format_is_sized_from_its_header(extension: str, params: list[int], format_name: str) -> None:
    picture = np.random.default_rng(0).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    ok, encoded = cv2.imencode(extension, picture, params)
    assert ok
    size = declared_size(encoded.tobytes())
    assert size is not None and (size.format, size.width, size.height) == (format_name, 53, 37)
    assert decode_image(encoded.tobytes(), 53 * 37).shape == (37, 53, 3)


def test_a_real_photo_is_sized_and_decoded() -> None:
    data = PHOTO.read_bytes()
    size = declared_size(data)
    assert size is not None and (size.width, size.height) == (512, 512)
    np.testing.assert_array_equal(decode_image(data, 512 * 512), cv2.imread(str(PHOTO), cv2.IMREAD_COLOR))


def test_a_decompression_bomb_is_refused_before_any_pixel_is_decoded() -> None:
    bomb = png_declaring(30000, 30000)
    assert len(bomb) < 1000
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with pytest.raises(ImageError) as refused:
        decode_image(bomb, 50_000_000, "the request's image")
    assert time.perf_counter() - started < 0.5  # decoding 900 Mpixels would take seconds
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < 100 * 1024  # KiB: no 2.7 GB frame
    assert refused.value.reason == "size"
    assert str(refused.value) == (
        "the request's image declares 30000×30000 pixels (900,000,000), over the limit of 50,000,000 "
        "(max_image_pixels); it was not decoded"
    )


def test_the_limit_counts_pixels_not_bytes() -> None:
    ok, encoded = cv2.imencode(".png", np.zeros((100, 100, 3), np.uint8))
    assert ok
    assert decode_image(encoded.tobytes(), 10_000).shape == (100, 100, 3)
    with pytest.raises(ImageError, match="100×100 pixels"):
        decode_image(encoded.tobytes(), 9_999)


def test_unknown_damaged_and_headerless_images_are_refused() -> None:
    with pytest.raises(ImageError, match="is no JPEG, PNG, BMP or WebP image") as unknown:
        decode_image(b"GIF89a" + bytes(100), 1000)
    assert unknown.value.reason == "format"
    truncated = PHOTO.read_bytes()[:2000]  # the header survives, the scan does not
    assert declared_size(truncated) is not None
    with pytest.raises(ImageError, match="damaged JPEG") as damaged:
        decode_image(truncated, 512 * 512)
    assert damaged.value.reason == "damaged"
    assert declared_size(b"\xff\xd8\xff\xda\x00\x08" + bytes(20)) is None  # a scan before any frame header
    assert declared_size(b"\xff\xd8\xff\xe0\x00") is None  # ends inside a segment
