"""Still images from a folder: natural order, once or in a loop, unreadable files skipped and named."""

from __future__ import annotations

import logging
from pathlib import Path

import cv2
import numpy as np
import pytest
from image_bombs import png_declaring
from source_media import read_all

from edge_runtime.errors import ConfigError
from edge_runtime.sources import make_source
from edge_runtime.sources.base import Frame
from edge_runtime.sources.configs import FolderSourceConfig
from edge_runtime.sources.folder import ImageFolderSource


@pytest.fixture
def photo_folder(tmp_path: Path, astronaut_bgr: np.ndarray) -> Path:
    """img1, img2, img3 (truncated, undecodable), img10 and a non-matching notes.txt."""
    for number in (1, 2, 10):
        shade = astronaut_bgr.copy()
        shade[:40, :40] = number * 20  # tells the images apart after JPEG
        assert cv2.imwrite(str(tmp_path / f"img{number}.jpg"), shade)
    good = (tmp_path / "img1.jpg").read_bytes()
    (tmp_path / "img3.jpg").write_bytes(good[:200])
    (tmp_path / "notes.txt").write_text("not an image")
    return tmp_path


def corner(frame: Frame) -> int:
    return round(float(frame.image[5:35, 5:35].mean()) / 20)


def folder_source(path: Path, **fields: object) -> ImageFolderSource:
    source = make_source(FolderSourceConfig.model_validate({"type": "folder", "path": path, **fields}), "album")
    assert isinstance(source, ImageFolderSource)
    return source


def play_once(path: Path) -> tuple[ImageFolderSource, list[Frame]]:
    source = folder_source(path)
    source.start()
    try:
        return source, read_all(source)
    finally:
        source.close()


def test_once_in_natural_order_skipping_an_unreadable_file(
    photo_folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="edge_runtime.sources")
    source, frames = play_once(photo_folder)
    assert [corner(frame) for frame in frames] == [1, 2, 10]
    assert [frame.index for frame in frames] == [0, 1, 2]
    assert frames[0].image.shape == (512, 512, 3)
    assert source.stats.malformed == 1 and source.stats.delivered == 3
    assert f"skipping {photo_folder / 'img3.jpg'}" in caplog.text


def test_loop_repeats_and_names_a_bad_file_once(photo_folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="edge_runtime.sources")
    source = folder_source(photo_folder, loop=True)
    source.start()
    try:
        frames = [frame for frame in (source.read(5.0) for _ in range(7)) if frame is not None]
    finally:
        source.close()
    assert [corner(frame) for frame in frames] == [1, 2, 10, 1, 2, 10, 1]
    assert source.stats.malformed >= 2
    assert caplog.text.count("img3.jpg") == 1


def test_pattern_selects_files(photo_folder: Path) -> None:
    source = folder_source(photo_folder, pattern="img1*.jpg")
    assert [path.name for path in source.listing()] == ["img1.jpg", "img10.jpg"]


def test_missing_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        folder_source(tmp_path / "absent").start()


def test_empty_folder_ends_at_once(tmp_path: Path) -> None:
    source = folder_source(tmp_path)
    source.start()
    try:
        assert read_all(source) == []
    finally:
        source.close()


def test_an_image_declaring_too_many_pixels_is_skipped_before_it_is_decoded(
    photo_folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="edge_runtime.sources")
    (photo_folder / "img5.jpg").write_bytes(png_declaring(30000, 30000))  # a PNG under a .jpg name, as uploads go
    source, frames = play_once(photo_folder)
    assert [corner(frame) for frame in frames] == [1, 2, 10]
    assert source.stats.malformed == 2
    assert "img5.jpg: it declares 30000×30000 pixels (900,000,000), over the limit of 50,000,000" in caplog.text
