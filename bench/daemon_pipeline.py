"""The daemon's pipeline end to end, against `benchmark_app` and against a naive loop, side by side.

Everything a result goes through is real: the `Pipeline` (feed thread, preprocessing, OpenVINO's
async runner, post thread, decoder, result message), the `Publisher` with its SQLite spool at QoS 1,
and a local Mosquitto started here, with `mosquitto_sub` (its own process) receiving every result.
Each comparison runs its sides alternately, round after round, so drift of the machine reaches both;
tables give medians over the rounds.

- throughput: an in-memory source hands out one decoded 640×480 BGR frame as fast as it is read,
  OpenVINO CPU with the throughput hint at explicit fp32; acknowledged results per second against
  `benchmark_app -hint throughput -infer_precision f32` on the same file. Goal: ratio ≥ 0.95. Two
  more sides bound what the publish path and preprocessing cost: the same pipeline with its results
  dropped instead of published, and that again on frames already at the model's input size (no
  resize, only normalisation). A second table splits the CPU time per result by thread (and broker,
  subscriber) for the last round.
- latency: the latency hint, and a source that hands out the next frame only when the previous
  result has reached a subscriber; median capture → publish (the result handed to the MQTT client,
  after its spool write) against `benchmark_app -hint latency`'s median. Goal: at most 1.5 ms more.
  Capture → arrival at a subscriber and the message's `latency_ms.total` are shown beside it.
- video: an H.264 640×480 file through the pipeline (file source, policy every, not realtime)
  against a loop doing read → preprocess → infer → decode → publish at QoS 1 and wait for the ack,
  one after the other, on the face detector. Goal: pipelined ≥ 1.3× naive.
- tracking: a detector (`--detectors`: the face detector, about 1 core-ms a frame, or BlazePose's person
  detector, about 14) in the throughput setting on a scene where people walk across and leave
  (`daemon_objects.py`), with tracking off, with `track:`, and with `track:`, 10 zones, 10 lines and
  events as docs/recipes/objects-zones-lines.md configures them; result messages per second, CPU ms per
  result by thread, and what the objects published. Goal: tracking within 3% of off.

    python bench/daemon_pipeline.py [--rounds 5] [--seconds 5] [--parts throughput latency video tracking]
        [--models mobilenet_v2 face] [--detectors face pose_detection]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import cv2
import numpy as np
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from edge_runtime.mqtt.topics import Topics
from edge_runtime.package.loader import open_package
from edge_runtime.pipeline.outputs import PublishPolicy
from edge_runtime.pipeline.preprocess import ImagePreprocessor
from edge_runtime.pipeline.results import FrameSize, ModelInfo, RuntimeInfo, StageLatency, build_result, encode
from edge_runtime.pipeline.streaming import Pipeline
from edge_runtime.sources import make_source
from edge_runtime.sources.configs import FileSourceConfig

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "tests")]

from backend_overhead import benchmark_app  # noqa: E402
from broker import Mosquitto  # noqa: E402
from daemon_harness import (  # noqa: E402
    CORES,
    DEVICE_ID,
    ROLES,
    VARIANT,
    Arrivals,
    CountingSubscriber,
    Daemon,
    DroppedResults,
    StillFrames,
    alternate,
    cpu_of,
    cpu_seconds,
    decoder_for,
    load,
)
from daemon_objects import DETECTORS, tracking_part  # noqa: E402
from models import FACE_PACKAGE, camera_frame, h264_clip, mobilenet_v2_package  # noqa: E402

WARMUP_S = 1.0
PARTS = {
    "throughput": "Throughput",
    "latency": "Latency, one frame at a time",
    "video": "H.264 file, pipelined",
    "tracking": "Tracking on and off",
}

# -- the measurements ------------------------------------------------------------------------------


def pipeline_fps(
    daemon: Daemon, package: Path, image: np.ndarray, seconds: float, cpu: list[dict[str, float]]
) -> float:
    """Acknowledged results per second after a warm-up; appends the CPU ms per result of each role to `cpu`."""
    model = load(package, "throughput")
    try:
        pipeline = daemon.run(model, StillFrames(image))
        time.sleep(WARMUP_S)
        acked, before, started = daemon.acked, cpu_seconds(daemon.processes), time.perf_counter()
        time.sleep(seconds)
        results = daemon.acked - acked
        rate = results / (time.perf_counter() - started)
        after = cpu_seconds(daemon.processes)
        cpu.append({role: (spent - before.get(role, 0.0)) * 1000 / results for role, spent in after.items()})
        daemon.finish(pipeline)
        return rate
    finally:
        model.close()


def unpublished_fps(package: Path, image: np.ndarray, seconds: float, at_input_size: bool) -> float:
    """Results per second of the pipeline with a sink that drops them; optionally on frames already at
    the model's input size, so that preprocessing is only the normalisation."""
    model = load(package, "throughput")
    try:
        if at_input_size:
            height, width = model.input_specs[0].spatial_size or image.shape[:2]
            image = cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)
        sink = DroppedResults()
        pipeline = Pipeline(
            name="bench",
            topics=Topics("edge", DEVICE_ID),
            source=StillFrames(image),
            model=model,
            decoder=decoder_for(model),
            input_spec=model.input_specs[0],
            policy=PublishPolicy(qos=1),
            sink=sink,
        )
        pipeline.start()
        time.sleep(WARMUP_S)
        counted, started = sink.count, time.perf_counter()
        time.sleep(seconds)
        rate = (sink.count - counted) / (time.perf_counter() - started)
        pipeline.stop()
        return rate
    finally:
        model.close()


@dataclass(frozen=True)
class LatencyRound:
    to_publish_ms: float  # medians over the round
    to_arrival_ms: float
    total_ms: float
    stages_ms: dict[str, float]


def pipeline_latency(
    daemon: Daemon, arrivals: Arrivals, package: Path, image: np.ndarray, seconds: float, kept: list[LatencyRound]
) -> float:
    """Median ms from capture to a subscriber, one frame at a time; appends the round's details to `kept`."""
    model = load(package, "latency")
    try:
        arrivals.gate.set()
        arrivals.source = source = StillFrames(image, arrivals.gate)
        pipeline = daemon.run(model, source)
        time.sleep(WARMUP_S)
        arrivals.to_arrival_ms.clear()
        arrivals.total_ms.clear()
        daemon.connection.published_at.clear()
        daemon.connection.recording = True
        time.sleep(seconds)
        daemon.connection.recording = False
        stages = pipeline.stats.percentiles()
        published = daemon.connection.published_at
        kept.append(
            LatencyRound(
                statistics.median((published[i] - source.captured_at[i]) * 1000 for i in list(published)),
                statistics.median(arrivals.to_arrival_ms),
                statistics.median(arrivals.total_ms),
                {stage: stages[stage]["p50"] for stage in ("pre", "infer", "post")},
            )
        )
        daemon.finish(pipeline)
        arrivals.source = None
        return kept[-1].to_publish_ms
    finally:
        model.close()


def video_pipelined(daemon: Daemon, clip: Path, frames: int, hint: str) -> float:
    model = load(FACE_PACKAGE, hint)
    try:
        acked, started = daemon.acked, time.perf_counter()
        pipeline = daemon.run(model, make_source(FileSourceConfig(type="file", path=clip, policy="every"), "clip"))
        if not pipeline.finished.wait(300):
            raise SystemExit("the clip did not finish within 300 s")
        daemon.finish(pipeline)
        elapsed = time.perf_counter() - started
        if pipeline.stats.results != frames or daemon.acked - acked != frames:
            raise SystemExit(f"{pipeline.stats.results} results, {daemon.acked - acked} acked, of {frames} frames")
        return frames / elapsed
    finally:
        model.close()


def video_naive(broker: Mosquitto, clip: Path, frames: int) -> float:
    """One frame at a time: read, preprocess, infer, decode, publish at QoS 1 and wait for the ack."""
    model = load(FACE_PACKAGE, "latency")
    preprocess = ImagePreprocessor(model.input_specs[0], model.inputs[0])
    decoder = decoder_for(model)
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="bench-naive", protocol=MQTTProtocolVersion.MQTTv5)
    client.connect(broker.host, broker.port)
    client.loop_start()
    runtime = RuntimeInfo(model.backend.runs_on.backend, model.backend.runs_on.device, model.backend.runs_on.precision)
    info = ModelInfo(model.package.name, model.package.manifest.version, VARIANT)
    try:
        started = time.perf_counter()
        capture = cv2.VideoCapture(str(clip), cv2.CAP_FFMPEG)
        count = 0
        while (read := capture.read())[0]:
            captured, t0 = time.time(), time.perf_counter()
            tensor, transform = preprocess(read[1])
            t1 = time.perf_counter()
            outputs = model.infer([tensor])
            t2 = time.perf_counter()
            decoded = decoder.decode(outputs, model.outputs, transform)
            now, post = time.time(), time.perf_counter() - t2
            latency = StageLatency((t1 - t0) * 1000, (t2 - t1) * 1000, post * 1000, (now - captured) * 1000)
            message = build_result(
                device_id="naive", pipeline="naive", source="clip", kind="frame", index=count,
                frame=FrameSize(transform.source_width, transform.source_height), captured_at=captured,
                published_at=now, model=info, runtime=runtime, latency=latency, task="detection",
                result=decoded.to_dict(),
            )  # fmt: skip
            client.publish("edge/naive/naive/result", encode(message), qos=1).wait_for_publish(5)
            count += 1
        capture.release()
        if count != frames:
            raise SystemExit(f"the naive loop read {count} of {frames} frames")
        return frames / (time.perf_counter() - started)
    finally:
        client.disconnect()
        client.loop_stop()
        model.close()


# -- rounds and tables -----------------------------------------------------------------------------


def throughput_part(daemon: Daemon, models: dict[str, Path], image: np.ndarray, args: argparse.Namespace) -> str:
    table = [
        "| model | pipeline FPS (acked) | benchmark_app FPS | ratio | goal ≥ 0.95 "
        "| ratio without publishing | ratio without publishing, frames at input size "
        "| rounds: pipeline / benchmark_app |",
        "|---|---:|---:|---:|---|---:|---:|---|",
    ]
    roles = ("OpenVINO", *dict.fromkeys(ROLES.values()), "broker", "subscriber")
    split = ["| model | " + " | ".join(roles) + " | all but OpenVINO | benchmark_app: cores / FPS |"]
    split.append("|---|" + "---:|" * (len(roles) + 2))
    for name, package in models.items():
        print(f"throughput: {name}", file=sys.stderr)
        model_file = open_package(package).source(VARIANT).path
        cpu: list[dict[str, float]] = []
        ours, theirs, unpublished, at_size = alternate(
            args.rounds,
            partial(pipeline_fps, daemon, package, image, args.seconds, cpu),
            partial(benchmark_app, model_file, "throughput", args.seconds),
            partial(unpublished_fps, package, image, args.seconds, False),
            partial(unpublished_fps, package, image, args.seconds, True),
        )
        reference = statistics.median(theirs)
        ratio = statistics.median(ours) / reference
        table.append(
            f"| {name} | {statistics.median(ours):.1f} | {reference:.1f} | {ratio:.3f} "
            f"| {'met' if ratio >= 0.95 else 'NOT met'} | {statistics.median(unpublished) / reference:.3f} "
            f"| {statistics.median(at_size) / reference:.3f} | {_listed(ours)} / {_listed(theirs)} |"
        )
        last = cpu[-1]
        overhead = sum(value for role, value in last.items() if role != "OpenVINO")
        cells = " | ".join(f"{last.get(role, 0.0):.3f}" for role in roles)
        split.append(f"| {name} | {cells} | {overhead:.3f} | {CORES * 1000 / theirs[-1]:.3f} |")
    return "\n".join([*table, "", "CPU ms per result, last round:", "", *split])


def latency_part(daemon: Daemon, models: dict[str, Path], image: np.ndarray, args: argparse.Namespace) -> str:
    table = [
        "| model | capture → publish ms | capture → subscriber ms | `latency_ms.total` ms | benchmark_app median ms "
        "| excess (publish) ms | goal ≤ 1.5 ms | excess (subscriber) ms | pre / infer / post p50 ms (last round) |",
        "|---|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    arrivals = Arrivals(daemon.broker)
    try:
        for name, package in models.items():
            print(f"latency: {name}", file=sys.stderr)
            kept: list[LatencyRound] = []
            to_publish, theirs = alternate(
                args.rounds,
                partial(pipeline_latency, daemon, arrivals, package, image, args.seconds, kept),
                partial(benchmark_app, open_package(package).source(VARIANT).path, "latency", args.seconds),
            )
            to_arrival = statistics.median(r.to_arrival_ms for r in kept)
            excess = statistics.median(to_publish) - statistics.median(theirs)
            stages = " / ".join(f"{value:.3f}" for value in kept[-1].stages_ms.values())
            table.append(
                f"| {name} | {statistics.median(to_publish):.3f} | {to_arrival:.3f} "
                f"| {statistics.median(r.total_ms for r in kept):.3f} | {statistics.median(theirs):.3f} "
                f"| {excess:+.3f} | {'met' if excess <= 1.5 else 'NOT met'} "
                f"| {to_arrival - statistics.median(theirs):+.3f} | {stages} |"
            )
    finally:
        arrivals.close()
    return "\n".join(table)


def video_part(daemon: Daemon, clip: Path, frames: int, rounds: int) -> str:
    print(f"video: {frames} frames of H.264 640x480", file=sys.stderr)
    sides = {
        "naive loop (latency hint, sync infer, wait for each PUBACK)": lambda: video_naive(daemon.broker, clip, frames),
        "pipeline, latency hint (a live camera's default)": lambda: video_pipelined(daemon, clip, frames, "latency"),
        "pipeline, throughput hint (a file's default)": lambda: video_pipelined(daemon, clip, frames, "throughput"),
    }
    busy: dict[str, list[float]] = {label: [] for label in sides}
    timed = [partial(_with_cpu_share, run, daemon.processes, busy[label]) for label, run in sides.items()]
    results = dict(zip(sides, alternate(rounds, *timed), strict=True))
    naive = statistics.median(next(iter(results.values())))
    table = [
        "| variant | fps (median) | rounds | × naive | goal ≥ 1.3× | CPU busy, share of all cores (median) |",
        "|---|---:|---|---:|---|---:|",
    ]
    for label, values in results.items():
        ratio = statistics.median(values) / naive
        verdict = "" if label.startswith("naive") else ("met" if ratio >= 1.3 else "NOT met")
        share = statistics.median(busy[label])
        table.append(
            f"| {label} | {statistics.median(values):.1f} | {_listed(values)} | {ratio:.2f} | {verdict} | {share:.0%} |"
        )
    return "\n".join(table)


def _with_cpu_share(run: Callable[[], float], processes: dict[str, int], shares: list[float]) -> float:
    """`run()`, appending the share of all cores that this process, the broker and the subscriber kept busy.

    Pipelining can only speed up a loop by using cores the loop leaves idle, so this bounds the gain.
    """
    pids = [os.getpid(), *processes.values()]  # whole processes: threads that ended meanwhile still count
    before, started = sum(cpu_of(Path(f"/proc/{pid}/stat")) for pid in pids), time.perf_counter()
    result = run()
    spent = sum(cpu_of(Path(f"/proc/{pid}/stat")) for pid in pids) - before
    shares.append(spent / (time.perf_counter() - started) / CORES)
    return result


def _listed(values: list[float]) -> str:
    return " ".join(f"{v:.0f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per side and round")
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS))
    parser.add_argument("--models", nargs="+", choices=("mobilenet_v2", "face"), default=("mobilenet_v2", "face"))
    parser.add_argument(
        "--detectors", nargs="+", choices=list(DETECTORS), default=["face"], help="the detectors the tracking part runs"
    )
    args = parser.parse_args()
    image = camera_frame()
    with tempfile.TemporaryDirectory() as tmp, Mosquitto(Path(tmp) / "broker") as broker:
        work = Path(tmp)
        models = {
            name: mobilenet_v2_package(work / name) if name == "mobilenet_v2" else FACE_PACKAGE for name in args.models
        }
        clip, frames = h264_clip(work / "clip.mp4")
        subscriber = CountingSubscriber(broker, work)
        daemon = Daemon(broker, work, subscriber.process.pid)
        parts = {
            "throughput": lambda: throughput_part(daemon, models, image, args),
            "latency": lambda: latency_part(daemon, models, image, args),
            "video": lambda: video_part(daemon, clip, frames, args.rounds),
            "tracking": lambda: "\n\n".join(
                f"{name}:\n\n{tracking_part(daemon, args.rounds, args.seconds, name)}" for name in args.detectors
            ),
        }
        try:
            tables = [(PARTS[part], parts[part]()) for part in args.parts]
            expected = daemon.connection.results_handed + (args.rounds * frames if "video" in args.parts else 0)
            time.sleep(1.0)
            arrived = subscriber.count()
        finally:
            daemon.close()
            subscriber.close()
    print(f"command: python bench/daemon_pipeline.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"{args.rounds} rounds, {args.seconds:g} s measured per side and round; the subscriber received")
    print(f"{arrived} results of {expected} acknowledged (the pipeline's and the naive loop's)")
    for title, table in tables:
        print(f"\n### {title}\n\n{table}")


if __name__ == "__main__":
    main()
