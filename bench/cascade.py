"""A cascade's cost: crops batched against crops one by one, and re-inference rules against every frame.

MediaPipe's face detector finds the astronaut's face in the bundled clip; MediaPipe's face landmark model
(192×192, bundled) runs on its crops through `CascadeStage`, as the daemon runs it: crop, preprocess,
infer, decode, map back to frame pixels.

1. Batched against one by one: N faces per frame (N = 1, 4, 16: the clip's face box shifted by a few
   pixels N times), the stage with the model's batch freed (one request of N) against the stage running
   N requests side by side on the model's async runner. Rounds alternate between the two; each round runs
   frames for `--seconds`, and which side goes first alternates too; the figure is the median over
   `--rounds` of milliseconds per frame. With one face both sides run the same single request: that row
   shows how far two equal measurements drift apart on the box.
2. Per tracked object: the clip's 60 frames at their 10 frames a second, tracked, the stage re-running on
   an object when its box grew by 20 % or a second passed (the defaults), against re-running on every
   frame (an interval shorter than a frame). The figures are the stage's crops and CPU milliseconds per
   tracked object per second of video (process CPU time, all threads), medians over rounds, alternating.

    python bench/cascade.py [--backend litert] [--rounds 5] [--seconds 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import cv2
import numpy as np
from models import ASTRONAUT_CLIP, FACE_PACKAGE

from edge_runtime.config.cascade import CascadeStageConfig
from edge_runtime.decoders.decoded import Detection, Detections
from edge_runtime.package.loader import open_package
from edge_runtime.pipeline.build import decoder_of
from edge_runtime.pipeline.cascade import Cascade, CascadeStage
from edge_runtime.pipeline.objects import ObjectStage
from edge_runtime.pipeline.preprocess import preprocessor_for
from edge_runtime.placement.model import LoadedModel, load_model
from edge_runtime.sources.base import Frame
from edge_runtime.tracking.config import TrackConfig

LANDMARKS = Path(__file__).resolve().parents[1] / "samples/models/face_landmark"
VARIANT = {"litert": "tflite/fp32", "openvino": "tflite/fp32"}


def clip_frames() -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(ASTRONAUT_CLIP))
    frames = []
    while True:
        ok, image = capture.read()
        if not ok:
            break
        frames.append(image)
    capture.release()
    return frames


def detect(detector: LoadedModel, image: np.ndarray) -> Detections:
    tensor, transform = preprocessor_for(detector.input_specs[0], detector.inputs[0])(image)
    decoded = decoder_of(detector).decode(detector.infer([tensor]), detector.outputs, transform)
    assert isinstance(decoded, Detections)
    return decoded


def stage_config(**fields: object) -> CascadeStageConfig:
    base = {"name": "landmarks", "model": {"path": str(LANDMARKS)}, "labels": ["face"], "padding": 0.25}
    return CascadeStageConfig.model_validate(base | {"max_crops": 16} | fields)


def shifted(face: Detection, count: int) -> Detections:
    """`count` faces: the box moved by up to 6 pixels each way, so every crop is cut and preprocessed anew."""
    rng = np.random.default_rng(count)
    boxes = []
    for dx, dy in rng.integers(-6, 7, size=(count, 2)):
        x_min, y_min, x_max, y_max = face.box
        boxes.append(Detection("face", face.score, (x_min + dx, y_min + dy, x_max + dx, y_max + dy)))
    return Detections(tuple(boxes))


def ms_per_frame(stage: CascadeStage, frame: Frame, faces: Detections, seconds: float) -> float:
    cascade = Cascade([stage])
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        cascade.on_frame(frame, faces)
        done += 1
    return (time.perf_counter() - started) / done * 1000


def batching(backend: str, frames: list[np.ndarray], detector: LoadedModel, args: argparse.Namespace) -> None:
    package = open_package(LANDMARKS)
    single = load_model(package, VARIANT[backend], backend, {})
    freed = load_model(package, VARIANT[backend], backend, {"dynamic_batch": True})
    face = detect(detector, frames[0]).detections[0]
    frame = Frame(frames[0], 0, 0.0, "clip")
    print(f"\n### Crops batched against one by one ({single.label}, {freed.label} with its batch freed)\n")
    print("| faces per frame | batched ms/frame | one by one ms/frame | one by one / batched |")
    print("|---:|---:|---:|---:|")
    for count in (1, 4, 16):
        faces = shifted(face, count)
        batched = CascadeStage(stage_config(), single, decoder_of(single), batched=freed)
        alone = CascadeStage(stage_config(), single, decoder_of(single))
        times: dict[str, list[float]] = {"batched": [], "alone": []}
        for round_ in range(args.rounds):  # alternating, and which goes first too
            order = [("batched", batched), ("alone", alone)]
            for side, stage in order if round_ % 2 == 0 else order[::-1]:
                times[side].append(ms_per_frame(stage, frame, faces, args.seconds))
        batched.close()
        alone.close()
        b, a = statistics.median(times["batched"]), statistics.median(times["alone"])
        print(f"| {count} | {b:.2f} | {a:.2f} | {a / b:.2f}× |")
    single.close()
    freed.close()


def per_object(backend: str, frames: list[np.ndarray], detector: LoadedModel, args: argparse.Namespace) -> None:
    model = load_model(open_package(LANDMARKS), VARIANT[backend], backend, {})
    found = [detect(detector, image) for image in frames]
    seconds_of_video = len(frames) / 10.0
    rules = {"re-inference rules (20 % growth, 1 s)": {}, "every frame": {"reinfer": {"interval_s": 1e-6}}}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in rules}
    for round_ in range(args.rounds):
        for name, fields in list(rules.items())[:: 1 if round_ % 2 == 0 else -1]:
            stage = CascadeStage(stage_config(**fields), model, decoder_of(model), tracked=True)
            objects = ObjectStage(TrackConfig.model_validate({"labels": ["face"]}), cascade=Cascade([stage]))
            seen: set[str] = set()
            cpu = time.process_time()
            for index, (image, decoded) in enumerate(zip(frames, found, strict=True)):
                marked = objects.on_frame(Frame(image, index, index / 10.0, "clip"), decoded)
                seen.update(d.track_id for d in marked.detections if d.track_id)
            cpu_ms = (time.process_time() - cpu) * 1000
            stage.close()
            object_seconds = max(len(seen), 1) * seconds_of_video
            figures[name].append((stage.counts.run / object_seconds, cpu_ms / object_seconds))
    print(f"\n### Per tracked object per second ({model.label}; the clip: {len(frames)} frames at 10 fps)\n")
    print("| stage runs | crops per object per s | CPU ms per object per s (tracker included) |")
    print("|---|---:|---:|")
    for name, values in figures.items():
        crops = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        print(f"| {name} | {crops:.2f} | {cpu:.1f} |")
    model.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=sorted(VARIANT), default="litert")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    print(f"command: python bench/cascade.py --backend {args.backend} --rounds {args.rounds} --seconds {args.seconds}")
    detector = load_model(open_package(FACE_PACKAGE), "openvino/fp32", "openvino", {"precision": "fp32"})
    frames = clip_frames()
    batching(args.backend, frames, detector, args)
    per_object(args.backend, frames, detector, args)
    detector.close()


if __name__ == "__main__":
    main()
