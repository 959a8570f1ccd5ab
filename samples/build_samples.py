"""Rebuilds the bundled samples from their public sources.

Run on a workstation with network access to PyPI:  python samples/build_samples.py
- MediaPipe's face and person detectors (Apache-2.0) from the `mediapipe==0.10.14` wheel, each
  packaged with its TFLite original and an OpenVINO IR converted from it;
- MediaPipe's face landmark model from the same wheel, its TFLite original, for cascades (detector → landmarks);
- the astronaut photograph (public domain, NASA) from the scikit-image wheel.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import openvino as ov

from edge_runtime.package.manifest import DecoderSpec, InputSpec, ModelFormat, Precision, Task
from edge_runtime.package.writer import describe_variant, write_package

SAMPLES = Path(__file__).resolve().parent


def fetch_wheel(requirement: str, into: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(into),
            requirement,
        ],
        check=True,
    )
    return next(into.glob("*.whl"))


# The keypoints each detector regresses, in its output order, as MediaPipe documents them (right and left are
# the subject's): BlazeFace's FaceKeyPoint, and BlazePose's detector's four points, from which MediaPipe derives
# the full-body (points 0 and 1) and upper-body (points 2 and 3) regions.
FACE_KEYPOINTS = ["right_eye", "left_eye", "nose_tip", "mouth_center", "right_ear_tragion", "left_ear_tragion"]
POSE_KEYPOINTS = ["mid_hip_center", "full_body_size_rotation", "mid_shoulder_center", "upper_body_size_rotation"]


def ssd_params(strides: list[int], input_size: int, keypoint_names: list[str]) -> dict[str, object]:
    """MediaPipe's SSD anchor settings for its BlazeFace/BlazePose detectors."""
    return {
        "num_layers": len(strides),
        "strides": strides,
        "min_scale": 0.1484375,
        "max_scale": 0.75,
        "anchor_offset": 0.5,
        "aspect_ratios": [1.0],
        "fixed_anchor_size": True,
        "box_scale": float(input_size),
        "num_keypoints": len(keypoint_names),
        "keypoint_names": keypoint_names,
        "score_clip": 100.0,
        "min_score": 0.5,
        "iou_threshold": 0.3,
    }


MEDIAPIPE_DETECTORS = {
    "face_detection_short_range": {
        "member": "mediapipe/modules/face_detection/face_detection_short_range.tflite",
        "description": "MediaPipe BlazeFace short-range face detector (faces within about 2 m), 128x128 RGB.",
        "size": 128,
        "outputs": ("regressors", "classificators"),
        "labels": ("face",),
        "decoder": ssd_params([8, 16, 16, 16], 128, FACE_KEYPOINTS),
        "openvino_ir": True,
    },
    "pose_detection": {
        "member": "mediapipe/modules/pose_detection/pose_detection.tflite",
        "description": "MediaPipe BlazePose person detector (finds the person and body-centre keypoints), 224x224 RGB.",
        "size": 224,
        "outputs": ("Identity", "Identity_1"),
        "labels": ("person",),
        "decoder": ssd_params([8, 16, 32, 32, 32], 224, POSE_KEYPOINTS),
        "openvino_ir": False,  # OpenVINO reads the .tflite itself; an fp32 IR would triple the size
    },
}


def build_mediapipe_detector(wheel: Path, name: str, spec: dict[str, Any]) -> None:
    root = SAMPLES / "models" / name
    (root / "tflite" / "fp32").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        (root / "tflite/fp32/model.tflite").write_bytes(archive.read(spec["member"]))
    variants = {
        "tflite/fp32": describe_variant(root, ["tflite/fp32/model.tflite"], ModelFormat.TFLITE, Precision.FP32),
    }
    if spec["openvino_ir"]:
        (root / "openvino" / "fp32").mkdir(parents=True, exist_ok=True)
        model = ov.convert_model(root / "tflite/fp32/model.tflite")
        ov.save_model(model, root / "openvino/fp32/model.xml", compress_to_fp16=False)
        variants["openvino/fp32"] = describe_variant(
            root, ["openvino/fp32/model.xml", "openvino/fp32/model.bin"], ModelFormat.OPENVINO, Precision.FP32
        )
    size = spec["size"]
    write_package(
        root,
        variants,
        name=name,
        version="0.10.14",
        task=Task.DETECTION,
        description=spec["description"],
        license="Apache-2.0",
        inputs=(
            InputSpec(
                shape=(1, size, size, 3),
                layout="NHWC",
                color_order="RGB",
                resize="letterbox",
                mean=(127.5,),
                std=(127.5,),
            ),
        ),
        output_names=spec["outputs"],
        labels=spec["labels"],
        decoder=DecoderSpec(name="ssd_anchors", params=spec["decoder"]),
    )


FACE_LANDMARK = {
    "member": "mediapipe/modules/face_landmark/face_landmark.tflite",
    "description": "MediaPipe face mesh: 468 face landmarks (x, y, z) on a face crop, 192x192 RGB in [0, 1]; "
    "run on the crops of a face detector's boxes with 25 % padding, as MediaPipe's face mesh graph feeds it.",
}


def build_face_landmark(wheel: Path) -> None:
    """The landmark model as it comes: its first output is 468 x (x, y, z) in input pixels, its second the face's
    presence as a logit. The keypoint decoder reads x and y; z is depth, not a position in the picture."""
    name = "face_landmark"
    root = SAMPLES / "models" / name
    (root / "tflite" / "fp32").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        (root / "tflite/fp32/model.tflite").write_bytes(archive.read(FACE_LANDMARK["member"]))
    variants = {
        "tflite/fp32": describe_variant(root, ["tflite/fp32/model.tflite"], ModelFormat.TFLITE, Precision.FP32),
    }
    write_package(
        root,
        variants,
        name=name,
        version="0.10.14",
        task=Task.KEYPOINTS,
        description=FACE_LANDMARK["description"],
        license="Apache-2.0",
        inputs=(
            InputSpec(
                shape=(1, 192, 192, 3), layout="NHWC", color_order="RGB", resize="letterbox", mean=(0.0,), std=(255.0,)
            ),
        ),
        output_names=("conv2d_21", "conv2d_31"),
        labels=(),
        decoder=DecoderSpec(
            name="keypoints",
            params={"format": "coordinates", "output": 0, "num_keypoints": 468, "coordinates": "pixels"},
        ),
    )


def build_clip(photo: Path, frames: int = 60, fps: float = 10.0) -> None:
    """A short 640x480 clip of the photo panning slowly, for the demo and the daemon's file source."""
    image = cv2.imread(str(photo), cv2.IMREAD_COLOR)
    head = cv2.resize(image[0:320, 70:390], (400, 400))
    (SAMPLES / "videos").mkdir(exist_ok=True)
    writer = cv2.VideoWriter(
        str(SAMPLES / "videos" / "astronaut.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), fps, (640, 480)
    )
    for index in range(frames):
        canvas = np.full((480, 640, 3), 32, np.uint8)
        x = 20 + round(100 * np.sin(index / frames * 2 * np.pi) + 100)
        canvas[40:440, x : x + 400] = head
        writer.write(canvas)
    writer.release()


def build_images(work: Path) -> None:
    wheel = fetch_wheel("scikit-image==0.26.0", work / "skimage")
    with zipfile.ZipFile(wheel) as archive:
        png = archive.read("skimage/data/astronaut.png")
    (work / "astronaut.png").write_bytes(png)
    image = cv2.imread(str(work / "astronaut.png"), cv2.IMREAD_COLOR)
    cv2.imwrite(str(SAMPLES / "images" / "astronaut.jpg"), image, [cv2.IMWRITE_JPEG_QUALITY, 90])


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        mediapipe = fetch_wheel("mediapipe==0.10.14", Path(tmp) / "mediapipe")
        for name, spec in MEDIAPIPE_DETECTORS.items():
            build_mediapipe_detector(mediapipe, name, spec)
        build_face_landmark(mediapipe)
        build_images(Path(tmp))
    build_clip(SAMPLES / "images" / "astronaut.jpg")
