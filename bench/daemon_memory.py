"""The daemon's resident memory over a long run: does it stay small, and does it stop growing?

Runs the real service as users run it, `python -m edge_runtime run --config FILE`, with one pipeline:
the face detector on a looping H.264 640×480 file played in real time (30 fps, like a camera), results
at QoS 1 through the spool to a local Mosquitto started here, with `mosquitto_sub` counting arrivals.
Every `--interval` seconds the daemon's VmRSS is read from /proc/PID/status. Reported: RSS at the end
of the warm-up (start), the maximum, the last sample (end), and the slope of a straight line fitted
over the second half of the run in MB per minute.

Goals: RSS below 250 MB, and no growth: a second-half slope below 0.05 MB/min (3 MB an hour, which
over a 5-minute half is within the allocator's noise of a few hundred kB).

With `--objects`, the pipeline follows objects as docs/recipes/objects-zones-lines.md shows, with 10 zones,
10 lines and events, on a looping clip where two faces walk across and leave every 3.3 s
(`daemon_objects.py`), so tracks start and end all the time; a second `mosquitto_sub` counts the events
(and the `end` ones among them) and line crossings the daemon publishes. Flat RSS there says that ended
tracks, their events, zone and line states and kept pictures are freed.

    python bench/daemon_memory.py [--seconds 600] [--interval 5] [--warmup 30] [--csv rss.csv] [--objects]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "tests")]

from broker import Mosquitto  # noqa: E402
from daemon_harness import CountingSubscriber, cpu_of  # noqa: E402
from daemon_objects import objects_sections, write_clip  # noqa: E402
from models import FACE_PACKAGE, h264_clip  # noqa: E402

RSS_GOAL_MB = 250.0
SLOPE_GOAL_MB_PER_MIN = 0.05
DEVICE_ID = "memory-box"


@dataclass(frozen=True)
class Sample:
    elapsed_s: float
    rss_mb: float
    results: int  # result messages the subscriber has received so far
    cpu_s: float  # CPU seconds the daemon has used so far, all its threads


class EventsSubscriber:
    """`mosquitto_sub` on the pipeline's events and line crossings, one payload a line, in its own process."""

    def __init__(self, broker: Mosquitto, directory: Path) -> None:
        self.path = directory / "events.txt"
        command = [shutil.which("mosquitto_sub") or "mosquitto_sub", "-h", broker.host, "-p", str(broker.control_port)]
        topics = ["-t", f"edge/{DEVICE_ID}/+/events", "-t", f"edge/{DEVICE_ID}/+/line/+"]
        with self.path.open("wb") as out:
            self.process = subprocess.Popen([*command, *topics, "-q", "1", "-F", "%t %p"], stdout=out)
        time.sleep(0.3)

    def summary(self) -> str:
        lines = self.path.read_bytes().splitlines()
        events = [line for line in lines if line.split(b" ", 1)[0].endswith(b"/events")]
        ended = sum(1 for line in events if b'"type":"end"' in line)
        new = sum(1 for line in events if b'"type":"new"' in line)
        crossings = len(lines) - len(events)
        return f"objects: {len(events)} event messages ({new} new, {ended} end), {crossings} line crossings received"

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(5)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def write_config(work: Path, broker: Mosquitto, clip: Path, objects: bool) -> Path:
    pipeline: dict[str, Any] = {
        "name": "faces",
        "source": {"type": "file", "path": str(clip), "loop": True, "realtime": True},
        "model": {"path": str(FACE_PACKAGE)},
    }
    if objects:
        pipeline |= objects_sections()
    config = {
        "device_id": DEVICE_ID,
        "mqtt": {"host": broker.host, "port": broker.port},
        "state_dir": str(work / "state"),
        "cache_dir": str(work / "cache"),
        "log_level": "info",
        "pipelines": [pipeline],
    }
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def watch(
    daemon: subprocess.Popen[bytes], subscriber: CountingSubscriber, seconds: float, interval: float
) -> list[Sample]:
    samples: list[Sample] = []
    started = time.monotonic()
    next_at = started + interval
    time.sleep(interval)
    while (elapsed := time.monotonic() - started) <= seconds + 0.5 * interval:
        if daemon.poll() is not None:
            raise SystemExit(f"the daemon exited with {daemon.returncode} after {elapsed:.0f} s")
        cpu_s = cpu_of(Path(f"/proc/{daemon.pid}/stat"))
        samples.append(Sample(elapsed, rss_mb(daemon.pid), subscriber.count(), cpu_s))
        if len(samples) % max(1, round(60 / interval)) == 0:
            last = samples[-1]
            print(f"  {last.elapsed_s:6.0f} s  RSS {last.rss_mb:6.1f} MB  results {last.results}", file=sys.stderr)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    return samples


def report(samples: list[Sample], seconds: float, warmup: float, command: str) -> str:
    start = next(s for s in samples if s.elapsed_s >= warmup)
    second_half = [s for s in samples if s.elapsed_s >= seconds / 2]
    minutes = np.array([s.elapsed_s / 60 for s in second_half])
    fit, covariance = np.polyfit(minutes, [s.rss_mb for s in second_half], 1, cov=True)
    slope, slope_error = float(fit[0]), float(np.sqrt(covariance[0, 0]))
    peak = max(s.rss_mb for s in samples)
    end = samples[-1]
    rate = (end.results - start.results) / (end.elapsed_s - start.elapsed_s)
    busy = (end.cpu_s - start.cpu_s) / (end.elapsed_s - start.elapsed_s)
    per_result_ms = (end.cpu_s - start.cpu_s) * 1000 / max(1, end.results - start.results)
    small = "met" if peak < RSS_GOAL_MB else "NOT met"
    flat = "met" if slope < SLOPE_GOAL_MB_PER_MIN else "NOT met"
    return "\n".join(
        [
            f"command: {command}",
            f"{len(samples)} samples every {samples[1].elapsed_s - samples[0].elapsed_s:.0f} s over {seconds:.0f} s; "
            f"{end.results} results received ({rate:.1f}/s after the warm-up); the daemon used {busy:.1%} of one core "
            f"after the warm-up, {per_result_ms:.2f} ms of CPU per result",
            "",
            "| RSS at start (after warm-up) | max | end | slope, second half | goal < 250 MB | goal: no growth |",
            "|---:|---:|---:|---:|---|---|",
            f"| {start.rss_mb:.1f} MB ({start.elapsed_s:.0f} s) | {peak:.1f} MB | {end.rss_mb:.1f} MB "
            f"| {slope:+.3f} ± {slope_error:.3f} MB/min | {small} | {flat} (< {SLOPE_GOAL_MB_PER_MIN} MB/min) |",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=30.0, help="the start figure is the first sample after this")
    parser.add_argument("--csv", type=Path, help="also write every sample here")
    parser.add_argument("--objects", action="store_true", help="track, 10 zones, 10 lines and events on walking faces")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Mosquitto(Path(tmp) / "broker") as broker:
        work = Path(tmp)
        clip = write_clip(work / "scene.avi") if args.objects else h264_clip(work / "clip.mp4")[0]
        config = write_config(work, broker, clip, args.objects)
        subscriber = CountingSubscriber(broker, work, topic=f"edge/{DEVICE_ID}/+/result")
        told = EventsSubscriber(broker, work) if args.objects else None
        told_summary = ""
        log_path = work / "daemon.log"
        with log_path.open("wb") as log:
            command = [sys.executable, "-m", "edge_runtime", "run", "--config", str(config)]
            daemon = subprocess.Popen(command, cwd=BENCH.parent, stdout=log, stderr=subprocess.STDOUT)
        try:
            samples = watch(daemon, subscriber, args.seconds, args.interval)
        finally:
            daemon.send_signal(signal.SIGTERM)
            code = daemon.wait(60)
            subscriber.close()
            if told is not None:
                time.sleep(0.5)
                told.close()
                told_summary = told.summary()
        if code != 0:
            raise SystemExit(f"the daemon exited with {code}:\n{log_path.read_text(errors='replace')[-3000:]}")
    if args.csv:
        lines = ["elapsed_s,rss_mb,results", *(f"{s.elapsed_s:.1f},{s.rss_mb:.2f},{s.results}" for s in samples)]
        args.csv.write_text("\n".join(lines) + "\n")
    print(report(samples, args.seconds, args.warmup, f"python bench/daemon_memory.py {' '.join(sys.argv[1:])}".strip()))
    if told is not None:
        print(told_summary)


if __name__ == "__main__":
    main()
