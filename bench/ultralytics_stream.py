"""The daemon's pipeline against Ultralytics' own `predict(stream=True)`: same OpenVINO model, same video.

- model: YOLOv8n built from Ultralytics' `yolov8n.yaml` (seeded initial weights, nothing downloaded: speed does
  not depend on what the weights learnt), exported by Ultralytics to OpenVINO IR at 640×640 without fp16
  compression, and turned into a package by `edge-convert` from that export's metadata.
- video: `samples/videos/astronaut.mp4` (a real photograph panned and zoomed) looped into a 640×480 H.264 file.
- edge_runtime: the daemon's `Pipeline` with a `file` source (policy every, not realtime), OpenVINO at explicit
  f32 with the hint the daemon gives such a file (throughput), the `yolo` decoder, every result published at
  QoS 1 through the `Publisher` and its SQLite spool to a Mosquitto started here on a free loopback port; a
  round ends when the broker has acknowledged the last frame's result.
- Ultralytics: `YOLO(<openvino dir>).predict(source=<video>, stream=True)` iterated to the end, publishing
  nothing. Its OpenVINO backend compiles with the latency hint and no precision, which lets OpenVINO pick bf16
  on CPUs that have it; the f32 side makes its core state f32 (as the peer test does), the default side
  leaves it alone. Each YOLO object is warmed up on one frame first, as the pipeline's model is loaded
  before its timer starts.
- benchmark_app: OpenVINO alone on the same IR with ready tensors and the throughput hint, at f32 and bf16:
  the ceiling the edge_runtime sides would reach if decoding the video, preprocessing, decoding the outputs
  and publishing cost nothing.
- edge_runtime_bf16: the edge_runtime side at bf16, the precision Ultralytics' default side gets.

Sides alternate round after round, in reversed order every other round; the tables give medians over the
rounds. The stage table splits the daemon's last round: its own stage timings (pre, infer from submission to
completion, post), CPU per frame by thread, and the same file decoded alone.

    .venv-peers/bin/python bench/ultralytics_stream.py [--rounds 5] [--loops 5] [--sides ...]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import cv2

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "tests")]

from broker import Mosquitto  # noqa: E402
from daemon_harness import CORES, VARIANT, CountingSubscriber, Daemon, cpu_of  # noqa: E402
from models import h264_clip  # noqa: E402

from edge_runtime.package.loader import open_package  # noqa: E402
from edge_runtime.placement.model import load_model  # noqa: E402
from edge_runtime.sources import make_source  # noqa: E402
from edge_runtime.sources.configs import FileSourceConfig  # noqa: E402

IMGSZ = 640
SIDES = (
    "edge_runtime",
    "ultralytics_f32",
    "benchmark_app_f32",
    "ultralytics_default",
    "edge_runtime_bf16",
    "benchmark_app_bf16",
)
BENCHMARK_APP_S = 8


def offline_ultralytics(config: Path) -> ModuleType:
    """Ultralytics imported with no network use, its settings kept in `config` (read when it is imported)."""
    os.environ.update(YOLO_OFFLINE="1", YOLO_AUTOINSTALL="0", YOLO_CONFIG_DIR=str(config), YOLO_VERBOSE="0")
    import ultralytics

    ultralytics.settings.update({"sync": False, "runs_dir": str(config / "runs")})
    return ultralytics


def export_yolov8n(ultralytics: ModuleType, work: Path) -> Path:
    """YOLOv8n from its yaml, exported to OpenVINO by Ultralytics; the export's folder."""
    import torch

    torch.manual_seed(0)
    model = ultralytics.YOLO("yolov8n.yaml")
    model.save(str(work / "yolov8n.pt"))  # an export names its folder after the checkpoint
    folder = ultralytics.YOLO(str(work / "yolov8n.pt")).export(format="openvino", imgsz=IMGSZ, half=False, device="cpu")
    return Path(folder)


def package_of(export: Path, work: Path) -> Path:
    """`edge-convert` on the export, building only the variant measured."""
    out = work / "pkg"
    xml = next(export.glob("*.xml"))
    command = [str(Path(sys.executable).parent / "edge-convert"), str(xml), "-o", str(out)]
    command += ["--variants", "openvino/fp32", "--bench-seconds", "0", "--quiet"]
    subprocess.run(command, check=True)
    return out


class F32Cores:
    """While on, every `openvino.Core` made states f32 for the CPU, as edge_runtime does for an fp32 variant."""

    def __init__(self) -> None:
        import openvino

        self.module = openvino
        self.original = openvino.Core

        class F32Core(openvino.Core):  # type: ignore[misc, name-defined]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self.set_property("CPU", {"INFERENCE_PRECISION_HINT": "f32"})

        self.f32 = F32Core

    def __call__(self, on: bool) -> None:
        self.module.Core = self.f32 if on else self.original


class Measured:
    """What the last round of each side saw, for the tables; keyed by side."""

    def __init__(self) -> None:
        self.compiled: dict[str, dict[str, str]] = {}
        self.detections: dict[str, int] = {}
        self.edge_stages: dict[str, dict[str, float]] = {}
        self.edge_cpu_ms: dict[str, dict[str, float]] = {}
        self.edge_cpu_share: dict[str, float] = {}
        self.ultralytics_speed: dict[str, dict[str, float]] = {}
        self.ultralytics_cpu_share: dict[str, float] = {}


def edge_fps(daemon: Daemon, package: Path, clip: Path, frames: int, precision: str, measured: Measured) -> float:
    """Frames per second through the daemon's pipeline, until the broker acknowledged every result."""
    model = load_model(
        open_package(package), VARIANT, "openvino", {"hint": "throughput", "precision": precision}
    )  # the hint the daemon gives a file not played in real time
    try:
        acked = daemon.acked
        sampler = ThreadCpu()
        started = time.perf_counter()
        pipeline = daemon.run(model, make_source(FileSourceConfig(type="file", path=clip, policy="every"), "clip"))
        if not pipeline.finished.wait(600):
            raise SystemExit("the clip did not finish within 600 s")
        daemon.finish(pipeline)
        elapsed = time.perf_counter() - started
        used = sampler.stop()
        if pipeline.stats.results != frames or daemon.acked - acked != frames:
            raise SystemExit(f"{pipeline.stats.results} results, {daemon.acked - acked} acked, of {frames} frames")
        side = "edge_runtime" if precision == "fp32" else f"edge_runtime_{precision}"
        measured.edge_stages[side] = {stage: values["p50"] for stage, values in pipeline.stats.percentiles().items()}
        measured.edge_cpu_ms[side] = {role: spent * 1000 / frames for role, spent in used.items()}
        measured.edge_cpu_share[side] = sum(used.values()) / elapsed / CORES
        last = pipeline.last_described
        measured.detections[side] = len(last.message["result"]["detections"]) if last is not None else 0
        measured.compiled[side] = compiled_properties(model.backend)
        return frames / elapsed
    finally:
        model.close()


def ultralytics_fps(
    ultralytics: ModuleType, export: Path, clip: Path, frames: int, side: str, f32: F32Cores, measured: Measured
) -> float:
    """Frames per second of `predict(stream=True)` over the whole file, after a warm-up on one frame."""
    f32(side == "ultralytics_f32")
    try:
        yolo = ultralytics.YOLO(str(export), task="detect")
        capture = cv2.VideoCapture(str(clip))
        _, first = capture.read()
        capture.release()
        yolo.predict(first, imgsz=IMGSZ, device="cpu", verbose=False)
        speeds: dict[str, list[float]] = {"preprocess": [], "inference": [], "postprocess": []}
        count = detections = 0
        cpu, started = time.process_time(), time.perf_counter()
        for result in yolo.predict(source=str(clip), stream=True, imgsz=IMGSZ, device="cpu", verbose=False):
            count += 1
            detections = len(result.boxes)
            for stage, values in speeds.items():
                values.append(result.speed[stage])
        elapsed = time.perf_counter() - started
        measured.ultralytics_cpu_share[side] = (time.process_time() - cpu) / elapsed / CORES
        if count != frames:
            raise SystemExit(f"Ultralytics gave {count} results of {frames} frames")
        measured.ultralytics_speed[side] = {stage: statistics.median(v) for stage, v in speeds.items()}
        measured.detections[side] = detections
        compiled = yolo.predictor.model.backend.ov_compiled_model
        measured.compiled[side] = {
            "precision": compiled.get_property("INFERENCE_PRECISION_HINT").to_string(),
            "hint": str(compiled.get_property("PERFORMANCE_HINT")),
            "streams": str(compiled.get_property("NUM_STREAMS")),
            "requests": str(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")),
        }
        return count / elapsed
    finally:
        f32(False)


def benchmark_app_fps(xml: Path, precision: str, side: str, measured: Measured) -> float:
    """OpenVINO alone on the same IR: `benchmark_app -hint throughput` with ready tensors, no video, no pre- or
    post-processing, no messages; what the edge_runtime side would reach if nothing but inference cost anything."""
    command = [str(Path(sys.executable).parent / "benchmark_app"), "-m", str(xml), "-d", "CPU", "-hint", "throughput"]
    command += ["-t", str(BENCHMARK_APP_S), "-infer_precision", precision]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    streams = re.search(r"NUM_STREAMS: (\d+)", out)
    requests = re.search(r"(\d+) inference requests", out)
    measured.compiled[side] = {
        "precision": precision,
        "hint": "THROUGHPUT",
        "streams": streams.group(1) if streams else "?",
        "requests": requests.group(1) if requests else "?",
    }
    found = re.search(r"Throughput:\s+([\d.]+) FPS", out)
    if found is None:
        raise SystemExit(f"benchmark_app printed no throughput:\n{out}")
    return float(found.group(1))


def compiled_properties(backend: Any) -> dict[str, str]:
    """What edge_runtime's OpenVINO backend reports it compiled (the same properties, read back)."""
    runs_on = backend.runs_on
    details = runs_on.details
    return {
        "precision": f"{runs_on.precision}",
        "hint": details.get("hint", "?"),
        "streams": details.get("streams", "?"),
        "requests": details.get("num_requests", "?"),
    }


ROLES = (
    ("source-", "file source (read, decode call)"),
    ("feed", "feed (preprocess)"),
    ("openvino-done", "completion"),
    ("post", "post (yolo decoder, message)"),
    ("mqtt-publisher", "publisher"),
    ("paho", "paho"),
    ("mqtt-spool", "spool flush"),
)


class ThreadCpu:
    """CPU seconds of this process's threads by role, from now until `stop`, sampled every 50 ms so that threads
    which end meanwhile (the pipeline's) still count. Threads Python did not start are OpenVINO's and FFmpeg's."""

    def __init__(self) -> None:
        self._before = self._read()
        self._seen: dict[int, tuple[str, float]] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self._thread.start()

    def _read(self) -> dict[int, tuple[str, float]]:
        names = {thread.native_id: thread.name for thread in threading.enumerate()}
        found = {}
        for task in Path("/proc/self/task").iterdir():
            tid = int(task.name)
            name = names.get(tid)
            role = "OpenVINO and FFmpeg threads" if name is None else "other Python threads"
            if name is not None:
                role = next((r for prefix, r in ROLES if name.startswith(prefix)), role)
            if name == "bench-sampler":
                continue
            found[tid] = (role, cpu_of(task / "stat"))
        return found

    def _run(self) -> None:
        while not self._done.wait(0.05):
            self._seen.update(self._read())

    def stop(self) -> dict[str, float]:
        self._done.set()
        self._thread.join()
        self._seen.update(self._read())
        used: dict[str, float] = {}
        for tid, (role, spent) in self._seen.items():
            used[role] = used.get(role, 0.0) + spent - self._before.get(tid, (role, 0.0))[1]
        return used


def decode_only(clip: Path) -> tuple[float, float]:
    """The file decoded alone with OpenCV, as both sides read it: (frames/s, CPU ms per frame)."""
    cpu, started = time.process_time(), time.perf_counter()
    capture = cv2.VideoCapture(str(clip), cv2.CAP_FFMPEG)
    count = 0
    while capture.read()[0]:
        count += 1
    capture.release()
    return count / (time.perf_counter() - started), (time.process_time() - cpu) * 1000 / count


def alternate(rounds: int, sides: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {name: [] for name in sides}
    for index in range(rounds):
        order = list(sides) if index % 2 == 0 else list(reversed(sides))
        for name in order:
            values[name].append(sides[name]())
        print(f"  round {index + 1}: " + ", ".join(f"{n} {values[n][-1]:.2f}" for n in sides), file=sys.stderr)
    return values


def versions() -> str:
    from importlib.metadata import version

    names = ("ultralytics", "openvino", "torch", "opencv-python-headless", "numpy", "paho-mqtt")
    mosquitto = subprocess.run(["mosquitto", "-h"], capture_output=True, text=True, check=False).stdout.splitlines()
    return (
        ", ".join(f"{n} {version(n)}" for n in names)
        + f", Python {platform.python_version()}, "
        + (mosquitto[0] if mosquitto else "mosquitto ?")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loops", type=int, default=5, help="times the 60-frame clip is played into the file")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Mosquitto(Path(tmp) / "broker") as broker:
        work = Path(tmp)
        ultralytics = offline_ultralytics(work / "ultralytics")
        export = export_yolov8n(ultralytics, work)
        package = package_of(export, work)
        xml = next(export.glob("*.xml"))
        clip, frames = h264_clip(work / "clip.mp4", loops=args.loops)
        subscriber = CountingSubscriber(broker, work)
        daemon = Daemon(broker, work, subscriber.process.pid)
        f32 = F32Cores()
        measured = Measured()
        runs: dict[str, Callable[[], float]] = {
            "edge_runtime": lambda: edge_fps(daemon, package, clip, frames, "fp32", measured),
            "edge_runtime_bf16": lambda: edge_fps(daemon, package, clip, frames, "bf16", measured),
            "benchmark_app_f32": lambda: benchmark_app_fps(xml, "f32", "benchmark_app_f32", measured),
            "benchmark_app_bf16": lambda: benchmark_app_fps(xml, "bf16", "benchmark_app_bf16", measured),
            "ultralytics_f32": lambda: ultralytics_fps(
                ultralytics, export, clip, frames, "ultralytics_f32", f32, measured
            ),
            "ultralytics_default": lambda: ultralytics_fps(
                ultralytics, export, clip, frames, "ultralytics_default", f32, measured
            ),
        }
        load_before = os.getloadavg()
        try:
            values = alternate(args.rounds, {side: runs[side] for side in args.sides})
            decoded_fps, decode_ms = decode_only(clip)
            time.sleep(1.0)
            arrived = subscriber.count()
            expected = daemon.acked
        finally:
            daemon.close()
            subscriber.close()
    report(args, values, measured, frames, arrived, expected, load_before, (decoded_fps, decode_ms))


def report(
    args: argparse.Namespace,
    values: dict[str, list[float]],
    measured: Measured,
    frames: int,
    arrived: int,
    expected: int,
    load_before: tuple[float, float, float],
    decoding: tuple[float, float],
) -> None:
    print(f"command: .venv-peers/bin/python bench/ultralytics_stream.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"{versions()}; {CORES} cores; load average before the rounds: {' '.join(f'{v:.2f}' for v in load_before)}")
    print(
        f"{args.rounds} rounds of {frames} frames (640x480 H.264) per side; the subscriber received {arrived} results"
    )
    print(f"of {expected} acknowledged\n")
    medians = {side: statistics.median(rounds) for side, rounds in values.items()}
    print("| side | OpenVINO precision / hint / streams / requests | fps (median) | rounds | CPU busy |")
    print("|---|---|---:|---|---:|")
    for side, rounds in values.items():
        described = " / ".join(measured.compiled.get(side, {}).get(k, "?") for k in ("precision", "hint", "streams"))
        described += " / " + measured.compiled.get(side, {}).get("requests", "?")
        share = measured.edge_cpu_share.get(side, measured.ultralytics_cpu_share.get(side))
        busy = f"{share:.0%}" if share is not None else ""  # benchmark_app runs in a process of its own
        listed = " ".join(f"{v:.2f}" for v in rounds)
        print(f"| {side} | {described} | {medians[side]:.2f} | {listed} | {busy} |")
    print("\nRatios, each the median over the rounds of that round's ratio (the machine drifts between rounds):\n")
    others = [side for side in values if not side.startswith("edge_runtime")]
    print("| | " + " | ".join(f"× {other}" for other in others) + " |")
    print("|---|" + "---:|" * len(others))
    for side in (s for s in values if s.startswith("edge_runtime")):
        ratios = [statistics.median(a / b for a, b in zip(values[side], values[o], strict=True)) for o in others]
        print(f"| {side} | " + " | ".join(f"{r:.2f}" for r in ratios) + " |")
    print(f"\ndetections in the last frame of the last round: {measured.detections}")
    for side, stages in measured.edge_stages.items():
        print(f"\n{side}, last round, p50 ms per frame: " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()))
        cpu = sorted(measured.edge_cpu_ms[side].items(), key=lambda item: -item[1])
        print(f"{side}, last round, CPU ms per frame: " + ", ".join(f"{role} {ms:.2f}" for role, ms in cpu))
        print(f"  all threads: {sum(measured.edge_cpu_ms[side].values()):.2f} ms per frame")
    for side, speed in measured.ultralytics_speed.items():
        print(f"{side}, last round, median ms per frame: " + ", ".join(f"{k} {v:.2f}" for k, v in speed.items()))
    print(f"the file decoded alone: {decoding[0]:.0f} frames/s, {decoding[1]:.2f} ms CPU per frame")


if __name__ == "__main__":
    main()
