"""An object's picture on a real photograph: the square around it, the box, the height and the quality."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from skimage import data

from edge_runtime.pipeline.object_snapshots import BOX_COLOUR, box_within, crop_region, object_snapshot_jpeg
from edge_runtime.tracking.snapshots import SnapshotSettings

FACE = (175.0, 40.0, 295.0, 200.0)  # the astronaut's head in skimage's 512 x 512 photograph


@pytest.fixture(scope="module")
def astronaut() -> np.ndarray:
    return np.ascontiguousarray(data.astronaut()[:, :, ::-1])  # RGB to the BGR frames are in


def decode(jpeg: bytes) -> np.ndarray:
    assert jpeg[:2] == b"\xff\xd8"
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    return image


def test_the_crop_is_a_square_around_the_object_scaled_to_the_height(astronaut: np.ndarray) -> None:
    settings = SnapshotSettings(box=False, height=160)
    picture = decode(object_snapshot_jpeg(astronaut, FACE, settings))
    assert picture.shape == (160, 160, 3)
    left, top, right, bottom = crop_region((512, 512), FACE, 160)
    assert right - left == bottom - top == 176  # the box's longer side (160) times 1.1
    expected = cv2.resize(astronaut[top:bottom, left:right], (160, 160), interpolation=cv2.INTER_AREA)
    assert np.abs(picture.astype(int) - expected).mean() < 4  # JPEG's loss only
    elsewhere = cv2.resize(astronaut[300:476, 300:476], (160, 160), interpolation=cv2.INTER_AREA)
    assert np.abs(picture.astype(int) - elsewhere).mean() > 20


def test_the_whole_frame_keeps_its_aspect_ratio(astronaut: np.ndarray) -> None:
    coffee = np.ascontiguousarray(data.coffee()[:, :, ::-1])  # 400 x 600
    picture = decode(object_snapshot_jpeg(coffee, (100.0, 50.0, 300.0, 250.0), SnapshotSettings(crop=False, box=False)))
    assert picture.shape == (270, 405, 3)
    expected = cv2.resize(coffee, (405, 270), interpolation=cv2.INTER_AREA)
    assert np.abs(picture.astype(int) - expected).mean() < 6  # JPEG's loss at quality 70
    assert np.abs(picture.astype(int) - expected[::-1]).mean() > 20


def test_the_box_is_drawn_where_the_object_is(astronaut: np.ndarray) -> None:
    settings = SnapshotSettings(crop=False, height=512, quality=95)
    boxed = decode(object_snapshot_jpeg(astronaut, FACE, settings, caption="person 0.91"))
    plain = decode(object_snapshot_jpeg(astronaut, FACE, settings.model_copy(update={"box": False})))
    changed = np.abs(boxed.astype(int) - plain).sum(axis=2) > 60
    rows, columns = np.nonzero(changed)
    assert abs(columns.min() - 175) <= 2 and abs(columns.max() - 295) <= 2
    assert rows.max() <= 202 and rows.min() < 40  # the caption above the box
    left_edge = boxed[100:140, 175].astype(int)
    assert np.abs(left_edge - BOX_COLOUR).mean(axis=1).max() < 40  # the box's own colour
    assert not changed[60:180, 190:280].any()  # nothing drawn over the face


def test_a_lower_quality_makes_a_smaller_file(astronaut: np.ndarray) -> None:
    sizes = [len(object_snapshot_jpeg(astronaut, FACE, SnapshotSettings(quality=q))) for q in (30, 70, 95)]
    assert sizes[0] < sizes[1] < sizes[2]


def test_the_crop_stays_inside_the_frame_and_never_shows_less_than_the_height_where_it_can() -> None:
    frame = (1280, 720)
    assert crop_region(frame, (0.0, 0.0, 40.0, 80.0), 270) == (0, 0, 270, 270)  # in the corner: shifted in
    assert crop_region(frame, (1250.0, 700.0, 1280.0, 720.0), 270) == (1010, 450, 1280, 720)
    assert crop_region(frame, (600.0, 300.0, 640.0, 380.0), 270) == (485, 205, 755, 475)  # small: centred, 270 a side
    assert crop_region(frame, (100.0, 0.0, 1200.0, 720.0), 270) == (45, 0, 1255, 720)  # cut to the frame
    assert box_within((600.0, 300.0, 640.0, 380.0), (485, 205, 755, 475)) == (115.0, 95.0, 155.0, 175.0)


def test_a_kept_crop_gives_the_same_picture_as_the_whole_frame(astronaut: np.ndarray) -> None:
    settings = SnapshotSettings(height=200)
    region = crop_region((512, 512), FACE, settings.height)
    kept = astronaut[region[1] : region[3], region[0] : region[2]].copy()
    from_crop = object_snapshot_jpeg(kept, box_within(FACE, region), settings, cropped=True)
    assert from_crop == object_snapshot_jpeg(astronaut, FACE, settings)
