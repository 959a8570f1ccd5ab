"""Rebuilds the bundled samples from their public sources.

Run on a workstation with network access to PyPI:  python samples/build_samples.py
- MediaPipe's face detector (Apache-2.0) from the `mediapipe==0.10.14` wheel, packaged with its
  TFLite original and an OpenVINO IR converted from it;
- the astronaut photograph (public domain, NASA) from the scikit-image wheel.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import cv2
import openvino as ov

from edge_runtime.package.manifest import DecoderSpec, InputSpec, ModelFormat, Precision, Task
from edge_runtime.package.writer import describe_variant, write_package

SAMPLES = Path(__file__).resolve().parent
FACE_MODEL = "mediapipe/modules/face_detection/face_detection_short_range.tflite"


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


def build_face_detector(work: Path) -> None:
    wheel = fetch_wheel("mediapipe==0.10.14", work / "mediapipe")
    root = SAMPLES / "models" / "face_detection_short_range"
    (root / "tflite" / "fp32").mkdir(parents=True, exist_ok=True)
    (root / "openvino" / "fp32").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        (root / "tflite/fp32/model.tflite").write_bytes(archive.read(FACE_MODEL))
    ov.save_model(
        ov.convert_model(root / "tflite/fp32/model.tflite"),
        root / "openvino/fp32/model.xml",
        compress_to_fp16=False,
    )
    variants = {
        "tflite/fp32": describe_variant(root, ["tflite/fp32/model.tflite"], ModelFormat.TFLITE, Precision.FP32),
        "openvino/fp32": describe_variant(
            root, ["openvino/fp32/model.xml", "openvino/fp32/model.bin"], ModelFormat.OPENVINO, Precision.FP32
        ),
    }
    write_package(
        root,
        variants,
        name="face_detection_short_range",
        version="0.10.14",
        task=Task.DETECTION,
        description="MediaPipe BlazeFace short-range face detector (faces within about 2 m), 128x128 RGB.",
        license="Apache-2.0",
        inputs=(
            InputSpec(
                shape=(1, 128, 128, 3),
                layout="NHWC",
                color_order="RGB",
                resize="letterbox",
                mean=(127.5,),
                std=(127.5,),
            ),
        ),
        output_names=("regressors", "classificators"),
        labels=("face",),
        decoder=DecoderSpec(
            name="ssd_anchors",
            params={
                "num_layers": 4,
                "strides": [8, 16, 16, 16],
                "min_scale": 0.1484375,
                "max_scale": 0.75,
                "anchor_offset": 0.5,
                "aspect_ratios": [1.0],
                "fixed_anchor_size": True,
                "box_scale": 128.0,
                "num_keypoints": 6,
                "score_clip": 100.0,
                "min_score": 0.5,
                "iou_threshold": 0.3,
            },
        ),
    )


def build_images(work: Path) -> None:
    wheel = fetch_wheel("scikit-image==0.26.0", work / "skimage")
    with zipfile.ZipFile(wheel) as archive:
        png = archive.read("skimage/data/astronaut.png")
    (work / "astronaut.png").write_bytes(png)
    image = cv2.imread(str(work / "astronaut.png"), cv2.IMREAD_COLOR)
    cv2.imwrite(str(SAMPLES / "images" / "astronaut.jpg"), image, [cv2.IMWRITE_JPEG_QUALITY, 90])


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        build_face_detector(Path(tmp))
        build_images(Path(tmp))
