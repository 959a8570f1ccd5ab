"""A small detection data set Ultralytics can train on in a minute: coloured shapes on real photographs.

The photographs are scikit-image's sample images (public domain or CC0, shipped inside the package, so
nothing is downloaded). Training images are square crops of them; the frames the peer tests compare
on are other photographs at camera sizes, with shapes at places and sizes the training never drew.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

NAMES = ("square", "disc", "triangle")
IMGSZ = 320  # training and export size: small, so two CPU cores train the model in about two minutes
TRAIN_PHOTOS = ("astronaut", "coffee", "immunohistochemistry", "hubble_deep_field", "retina")
TEST_PHOTOS = ("chelsea", "rocket", "coffee")


def photo(name: str) -> np.ndarray:
    """A scikit-image sample photograph as OpenCV holds it: BGR uint8."""
    from skimage import data

    return cv2.cvtColor(np.ascontiguousarray(getattr(data, name)()), cv2.COLOR_RGB2BGR)


def draw_shapes(
    image: np.ndarray, rng: np.random.Generator, count: int
) -> list[tuple[int, float, float, float, float]]:
    """Draws `count` filled shapes that do not overlap much; returns (class, x_min, y_min, x_max, y_max) each."""
    height, width = image.shape[:2]
    drawn: list[tuple[int, float, float, float, float]] = []
    for _ in range(count * 20):
        if len(drawn) == count:
            break
        side = int(rng.uniform(0.12, 0.3) * min(height, width))
        x, y = int(rng.integers(0, width - side)), int(rng.integers(0, height - side))
        if any(x < b[3] and b[1] < x + side and y < b[4] and b[2] < y + side for b in drawn):
            continue
        cls = int(rng.integers(0, len(NAMES)))
        colour = tuple(int(c) for c in rng.permutation([int(rng.integers(200, 256)), int(rng.integers(0, 60)), 0]))
        if cls == 0:
            cv2.rectangle(image, (x, y), (x + side - 1, y + side - 1), colour, -1)
        elif cls == 1:
            cv2.circle(image, (x + side // 2, y + side // 2), side // 2, colour, -1, cv2.LINE_AA)
        else:
            corners = np.asarray([[x + side // 2, y], [x, y + side - 1], [x + side - 1, y + side - 1]], np.int32)
            cv2.fillPoly(image, [corners], colour, cv2.LINE_AA)
        drawn.append((cls, float(x), float(y), float(x + side), float(y + side)))
    return drawn


def write_dataset(root: Path, images: int = 48, size: int = IMGSZ, seed: int = 0) -> Path:
    """A YOLO-format data set (images/train, labels/train, used for validation too) and its data.yaml."""
    rng = np.random.default_rng(seed)
    sources = [photo(name) for name in TRAIN_PHOTOS]
    (root / "images" / "train").mkdir(parents=True)
    (root / "labels" / "train").mkdir(parents=True)
    for index in range(images):
        source = sources[index % len(sources)]
        crop = int(rng.uniform(0.5, 1.0) * min(source.shape[:2]))
        top, left = int(rng.integers(0, source.shape[0] - crop + 1)), int(rng.integers(0, source.shape[1] - crop + 1))
        image = cv2.resize(source[top : top + crop, left : left + crop], (size, size), interpolation=cv2.INTER_AREA)
        boxes = draw_shapes(image, rng, int(rng.integers(1, 5)))
        cv2.imwrite(str(root / "images" / "train" / f"{index:03d}.jpg"), image)
        lines = [
            f"{c} {(x0 + x1) / 2 / size:.6f} {(y0 + y1) / 2 / size:.6f} {(x1 - x0) / size:.6f} {(y1 - y0) / size:.6f}"
            for c, x0, y0, x1, y1 in boxes
        ]
        (root / "labels" / "train" / f"{index:03d}.txt").write_text("\n".join(lines) + "\n")
    names = "\n".join(f"  {i}: {name}" for i, name in enumerate(NAMES))
    config = root / "data.yaml"
    config.write_text(f"path: {root}\ntrain: images/train\nval: images/train\nnames:\n{names}\n")
    return config


def camera_frames(seed: int = 1) -> dict[str, np.ndarray]:
    """Frames at camera sizes, landscape and portrait, plus one whose letterbox rounds: photographs the training
    never saw, with shapes drawn in."""
    rng = np.random.default_rng(seed)
    sizes = {"landscape_640x480": (640, 480), "portrait_480x640": (480, 640), "odd_451x300": (451, 300)}
    frames = {}
    for (name, (width, height)), source in zip(sizes.items(), TEST_PHOTOS, strict=True):
        image = cv2.resize(photo(source), (width, height), interpolation=cv2.INTER_AREA)
        draw_shapes(image, rng, 4)
        frames[name] = image
    return frames
