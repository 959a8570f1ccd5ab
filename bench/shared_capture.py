"""Two pipelines on one 1080p H.264 camera: one shared capture against two captures of their own.

A real RTSP server (the test suite's relay: ffmpeg packetises the clip, the relay serves it over
RTSP/TCP to every client, in this process) plays a 1920×1080 H.264 clip at 25 fps in a loop. Three
sides read it, each in a fresh child process that measures its own CPU time (every thread: OpenCV's
FFmpeg decoder threads, the capture threads, the readers):

- single: one pipeline's source, an inline stream source at max_fps 5: what one capture costs;
- inline: two pipelines with inline sources, max_fps 5 and 2 (today's behaviour: two connections, two
  decodes);
- shared: the same two pipelines on one named source (`sources:`): one connection, one decode.

Each pipeline is a thread reading its source as a pipeline's feed thread does; the model is left out,
since it costs the same on every side and the comparison is of the capture. The sides run one after the
other, in a rotating order, round after round, so that drift of the machine reaches all of them; the
table gives medians over the rounds of CPU seconds per second and frames delivered per second to each
pipeline. Goal: shared ≤ 1.1× single (one decode's worth of CPU), while inline is about 2×.

    python bench/shared_capture.py [--rounds 5] [--seconds 10]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "sources")]

from broker import free_port  # noqa: E402
from rtsp_relay import RtspRelay  # noqa: E402

from edge_runtime.sources import make_source  # noqa: E402
from edge_runtime.sources.base import Source, SourceContext  # noqa: E402
from edge_runtime.sources.configs import SharedSourceConfig, StreamCamera, StreamSourceConfig  # noqa: E402
from edge_runtime.sources.shared import SharedSources  # noqa: E402

RATES = (5.0, 2.0)  # the two pipelines' max_fps
SIDES = ("single", "inline", "shared")


def make_clip(directory: Path) -> Path:
    """The bundled astronaut clip scaled to 1080p at 25 fps and coded as a camera would (H.264, GOP of 50)."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise SystemExit("ffmpeg is needed on PATH")
    target = directory / "camera-1080p.mkv"
    command = [ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-stream_loop", "4"]
    command += ["-i", str(REPO / "samples" / "videos" / "astronaut.mp4"), "-vf", "scale=1920:1080,fps=25"]
    command += ["-c:v", "libx264", "-preset", "veryfast", "-g", "50", "-pix_fmt", "yuv420p", str(target)]
    subprocess.run(command, check=True, timeout=600)
    return target


def sources_for(side: str, url: str) -> list[Source]:
    def stream(max_fps: float) -> StreamSourceConfig:
        return StreamSourceConfig(type="stream", url=url, max_fps=max_fps)

    if side == "single":
        return [make_source(stream(RATES[0]), "single")]
    if side == "inline":
        return [make_source(stream(rate), f"inline-{rate:g}") for rate in RATES]
    shared = SharedSources({"camera": StreamCamera(type="stream", url=url)})
    context = SourceContext(shared=shared)
    return [
        make_source(SharedSourceConfig(type="shared", name="camera", max_fps=rate), f"shared-{rate:g}", context)
        for rate in RATES
    ]


def measure(side: str, url: str, seconds: float, queue: Any) -> None:
    """In a child process: start the side's sources, let them settle, then count CPU time and frames."""
    sources = sources_for(side, url)
    counts = [0] * len(sources)
    stop = threading.Event()

    def read(index: int, source: Source) -> None:
        while not stop.is_set():
            if source.read(0.5) is not None:
                counts[index] += 1

    for source in sources:
        source.start()
    readers = [threading.Thread(target=read, args=pair, daemon=True) for pair in enumerate(sources)]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + 30
    while not all(counts) and time.monotonic() < deadline:  # connected, decoding, first frames through
        time.sleep(0.1)
    time.sleep(1.0)
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    first = list(counts)
    time.sleep(seconds)
    after, elapsed = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - started
    delivered = [(now - then) / elapsed for now, then in zip(counts, first, strict=True)]
    stop.set()
    for source in sources:
        source.close()
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / elapsed
    queue.put({"cpu": cpu, "fps": delivered})


def run_side(side: str, url: str, seconds: float) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=measure, args=(side, url, seconds, queue))
    child.start()
    result: dict[str, Any] = queue.get(timeout=seconds + 120)
    child.join(30)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        clip = make_clip(Path(tmp))
        relay = RtspRelay(shutil.which("ffmpeg") or "ffmpeg", clip, free_port(), Path(tmp))
        relay.start()
        try:
            rows: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
            for round_number in range(args.rounds):
                order = SIDES[round_number % 3 :] + SIDES[: round_number % 3]
                for side in order:
                    connections = relay.connections
                    result = run_side(side, relay.url, args.seconds)
                    result["connections"] = relay.connections - connections
                    rows[side].append(result)
                    print(f"round {round_number + 1} {side}: {result}", flush=True)
        finally:
            relay.stop()
    single_cpu = statistics.median(r["cpu"] for r in rows["single"])
    print("\n| side | connections | CPU s/s (median) | × single | frames/s to pipeline 1 | to pipeline 2 |")
    print("|---|---|---|---|---|---|")
    for side in SIDES:
        cpu = statistics.median(r["cpu"] for r in rows[side])
        fps = [statistics.median(r["fps"][i] for r in rows[side]) for i in range(len(rows[side][0]["fps"]))]
        shown = " | ".join(f"{value:.2f}" for value in fps) + (" | -" if len(fps) == 1 else "")
        connections = max(r["connections"] for r in rows[side])
        print(f"| {side} | {connections} | {cpu:.3f} | {cpu / single_cpu:.2f} | {shown} |")


if __name__ == "__main__":
    main()
