"""A small COCO-annotated validation set of real photos for the face detector, and its conversion options."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import yaml

from converters.describe import InputFlags
from converters.pipeline import ConvertOptions

FACE_PACKAGE = Path(__file__).resolve().parents[2] / "samples" / "models" / "face_detection_short_range"
FACE_MODEL = FACE_PACKAGE / "tflite" / "fp32" / "model.tflite"

# Faces drawn by hand as COCO boxes (x, y, width, height), by looking at the pictures: hairline to chin,
# cheek to cheek; the cameraman is in profile, so his box runs from his ear to the tip of his nose.
ASTRONAUT_FACE = (176, 80, 92, 94)  # samples/images/astronaut.jpg, 512x512
CAMERAMAN_FACE = (180, 122, 78, 72)  # scikit-image's camera(), 512x512


@dataclass(frozen=True)
class AnnotatedImages:
    folder: Path
    annotations: Path
    coco: dict[str, Any]  # the file's content, for tests that write broken versions of it


def _shifted(box: tuple[int, int, int, int], dx: int, dy: int) -> list[int]:
    return [box[0] + dx, box[1] + dy, box[2], box[3]]


def write_annotated_faces(astronaut_bgr: np.ndarray, root: Path) -> AnnotatedImages:
    """Real photos with hand-drawn face boxes (flipped, cropped and side-by-side versions too) and three without."""
    from skimage import data

    camera = cv2.cvtColor(data.camera(), cv2.COLOR_GRAY2BGR)
    astronaut_close, camera_close = astronaut_bgr[40:300, 100:360], camera[60:320, 100:360]
    x, y, w, h = ASTRONAUT_FACE
    images: dict[str, tuple[np.ndarray, list[list[int]]]] = {
        "astronaut.png": (astronaut_bgr, [list(ASTRONAUT_FACE)]),
        "astronaut_flipped.png": (astronaut_bgr[:, ::-1], [[512 - x - w, y, w, h]]),
        "astronaut_closeup.png": (astronaut_close, [_shifted(ASTRONAUT_FACE, -100, -40)]),
        "cameraman.png": (camera, [list(CAMERAMAN_FACE)]),
        "two_faces.png": (
            np.hstack([astronaut_close, camera_close]),
            [_shifted(ASTRONAUT_FACE, -100, -40), _shifted(CAMERAMAN_FACE, -100 + 260, -60)],
        ),
        "coffee.png": (cv2.cvtColor(data.coffee(), cv2.COLOR_RGB2BGR), []),
        "chelsea_the_cat.png": (cv2.cvtColor(data.chelsea(), cv2.COLOR_RGB2BGR), []),
        "rocket.png": (cv2.cvtColor(data.rocket(), cv2.COLOR_RGB2BGR), []),
    }
    folder = root / "images"
    folder.mkdir(parents=True)
    coco: dict[str, Any] = {"images": [], "annotations": [], "categories": [{"id": 1, "name": "face"}]}
    for image_id, (name, (image, boxes)) in enumerate(images.items(), start=1):
        cv2.imwrite(str(folder / name), np.ascontiguousarray(image))
        coco["images"].append({"id": image_id, "file_name": name, "width": image.shape[1], "height": image.shape[0]})
        for box in boxes:
            entry = {"id": len(coco["annotations"]) + 1, "image_id": image_id, "bbox": box, "category_id": 1}
            coco["annotations"].append({**entry, "iscrowd": 0})
    annotations = root / "faces.json"
    annotations.write_text(json.dumps(coco, indent=1), encoding="utf-8")
    return AnnotatedImages(folder, annotations, coco)


def face_decoder_params() -> str:
    """The bundled face package's decoder parameters, as --decoder-params JSON."""
    manifest = yaml.safe_load((FACE_PACKAGE / "model.yaml").read_text(encoding="utf-8"))
    return json.dumps(manifest["decoder"]["params"])


def face_detection_options(out_dir: Path, faces: AnnotatedImages, **changes: Any) -> ConvertOptions:
    """Converting the bundled BlazeFace TFLite model, scored on the annotated faces."""
    options = ConvertOptions(
        model=FACE_MODEL,
        out_dir=out_dir,
        task="detection",
        labels="face",
        input_flags=InputFlags(color_order="RGB", mean=(127.5,), std=(127.5,), resize="letterbox"),
        decoder="ssd_anchors",
        decoder_params=face_decoder_params(),
        validation=faces.folder,
        annotations=faces.annotations,
        bench_seconds=0,
    )
    return replace(options, **changes)
