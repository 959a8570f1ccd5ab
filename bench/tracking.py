"""The tracker's cost per analysed frame, and what importing it costs the daemon.

Update time: one `Tracker.update` call per frame, on pre-generated detections (so making them is not
timed), for 20 and 100 objects bouncing about a 1920×1080 frame at 10 fps with box noise, 5 % misses
and two false positives a frame. The first 50 frames (tracks being confirmed) are not timed. Each round
times `--frames` consecutive updates of each size in turn and takes their median; the table gives the
median of the rounds' medians and their spread. One thread: numpy's BLAS is limited to one before numpy
is imported. Goals: at most 0.5 ms for 20 objects and 2 ms for 100.

Zones, lines and events: what `Zones.update_from`, `Lines.update_from` and `ObjectEvents.update` (events'
messages and picture decisions, with the config's defaults; encoding pictures is the pipeline's) cost per
frame, on the tracker's answers for the 20-object scene (computed beforehand, so the tracker is not
timed), with 10 zones (random convex polygons of 4 to 8 corners, each about a tenth of the frame) and
10 lines (random segments a fifth to a half of the frame long), every zone and line taking every label.
Rounds and medians as above. Goal: zones, lines and events together at most 0.3 ms per frame.

Against roboflow's `ByteTrackTracker` (`--peers`): the same detections at 20 and 100 objects go through
both trackers in the same run, each round timing `--frames` updates of ours and then the same frames
through `ByteTrackTracker`, the side that goes first alternating round by round. `ByteTrackTracker` is set
up as for a camera: `frame_rate` 10 and each frame's capture time as `timestamp`, one tracker for both
labels (one per label would cost a second call per frame), its thresholds at their defaults; its input,
`supervision.Detections`, is built for every frame beforehand, as ours is, so neither side's timer counts
building it. Goal: ours at least 5 times faster. Only the peers environment has `trackers`:
`.venv-peers/bin/python bench/tracking.py --peers`.

Import: `import edge_runtime.tracking` in fresh interpreters that have already imported what the daemon
always has (numpy, pydantic, the config base), so the figures are what tracking adds: wall time and
resident memory (VmRSS) before and after, medians over `--imports` interpreters. Goals: at most 50 ms
and 10 MB, and none of scipy, PIL, matplotlib loaded. The same from a bare interpreter is shown too.

    python bench/tracking.py [--rounds 9] [--frames 200] [--imports 7] [--peers]
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from edge_runtime.decoders.decoded import Detection  # noqa: E402
from edge_runtime.tracking import TrackConfig, Tracker, TrackUpdate  # noqa: E402
from edge_runtime.tracking.events import EventsConfig, ObjectEvents  # noqa: E402
from edge_runtime.tracking.lines import LineConfig, Lines  # noqa: E402
from edge_runtime.tracking.zones import ZoneConfig, Zones  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT, FPS = 1920, 1080, 10.0
WARM_UP = 50
GOALS_MS = {20: 0.5, 100: 2.0}
IMPORT_GOALS = (50.0, 10.0)  # ms, MB
PLACES = (20, 10, 10)  # objects, zones, lines
PLACES_GOAL_MS = 0.3  # zones, lines and events together
HEAVY = ("scipy", "PIL", "matplotlib", "cv2", "torch")
PEER_GOAL = 5.0  # ByteTrackTracker's update time over ours, at least
PEERS_MISSING = (
    "--peers times roboflow's ByteTrackTracker, from the `trackers` package, which this environment lacks ({error}).\n"
    "It is installed in the peers environment only: make .venv-peers/.installed-stamp, then\n"
    "    .venv-peers/bin/python bench/tracking.py --peers"
)

IMPORT_PROBE = """
import json, sys, time
%s
def rss_mb():
    with open('/proc/self/status') as status:
        return next(int(line.split()[1]) for line in status if line.startswith('VmRSS:')) / 1024
before, start = rss_mb(), time.perf_counter()
import edge_runtime.tracking
elapsed = time.perf_counter() - start
heavy = [name for name in %r if name in sys.modules]
print(json.dumps({"ms": elapsed * 1000, "mb": rss_mb() - before, "heavy": heavy}))
"""
ALREADY_LOADED = "import numpy, pydantic, edge_runtime.config.base"  # what the daemon has imported anyway


def frames_of(objects: int, count: int, seed: int = 0) -> list[list[Detection]]:
    """`count` frames of `objects` boxes bouncing about the frame, as a detector would report them."""
    rng = np.random.default_rng(seed)
    sizes = rng.uniform([30, 80], [70, 160], (objects, 2))
    positions = rng.uniform([0, 0], [WIDTH, HEIGHT], (objects, 2)) - sizes
    velocities = rng.uniform(-150, 150, (objects, 2))
    labels = rng.choice(["person", "car"], objects, p=[0.7, 0.3])
    frames = []
    for _ in range(count):
        positions += velocities / FPS
        bounce = (positions < 0) | (positions + sizes > [WIDTH, HEIGHT])
        velocities[bounce] *= -1
        noise = rng.normal(0, 0.03, (objects, 4)) * np.concatenate([sizes, sizes], axis=1)
        boxes = np.concatenate([positions, positions + sizes], axis=1) + noise
        scores = np.clip(rng.normal(0.8, 0.1, objects), 0.15, 0.99)
        seen = rng.random(objects) > 0.05
        detections = [
            Detection(str(labels[i]), float(scores[i]), (boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3]))
            for i in np.flatnonzero(seen)
        ]
        for _ in range(2):
            x, y = rng.uniform(0, WIDTH - 60), rng.uniform(0, HEIGHT - 120)
            detections.append(Detection("person", float(rng.uniform(0.1, 0.6)), (x, y, x + 50, y + 110)))
        frames.append(detections)
    return frames


def update_times_ms(sizes: list[int], rounds: int, frames: int) -> dict[int, tuple[list[float], int]]:
    """Per size, the median update time of each round and the number of objects reported at the end.

    The sizes take turns round by round, so that a busy spell of the machine falls on all of them alike.
    """
    sequences = {objects: frames_of(objects, WARM_UP + rounds * frames) for objects in sizes}
    trackers = {objects: Tracker(TrackConfig()) for objects in sizes}
    for objects, tracker in trackers.items():
        for index in range(WARM_UP):
            tracker.update(sequences[objects][index], index / FPS, (WIDTH, HEIGHT))
    medians: dict[int, list[float]] = {objects: [] for objects in sizes}
    reported = dict.fromkeys(sizes, 0)
    for round_number in range(rounds):
        for objects, tracker in trackers.items():
            times = []
            for offset in range(frames):
                index = WARM_UP + round_number * frames + offset
                start = time.perf_counter()
                update = tracker.update(sequences[objects][index], index / FPS, (WIDTH, HEIGHT))
                times.append(time.perf_counter() - start)
                reported[objects] = len(update.objects)
            medians[objects].append(statistics.median(times) * 1000)
    return {objects: (medians[objects], reported[objects]) for objects in sizes}


def peer_update_times_ms(
    sizes: list[int], rounds: int, frames: int
) -> dict[int, tuple[list[float], list[float], tuple[int, int]]]:
    """Per size, each round's median update time for ours and for `ByteTrackTracker` on the same frames, and
    the objects each reported in the last frame. Within a round ours goes first on even rounds and
    `ByteTrackTracker` on odd ones, and the sizes take turns, so a busy spell of the machine falls on both."""
    import supervision as sv
    from trackers import ByteTrackTracker

    def as_supervision(detections: list[Detection]) -> sv.Detections:
        return sv.Detections(
            xyxy=np.array([d.box for d in detections], dtype=np.float64).reshape(-1, 4),
            confidence=np.array([d.score for d in detections], dtype=np.float64),
        )

    sequences = {objects: frames_of(objects, WARM_UP + rounds * frames) for objects in sizes}
    peer_sequences = {objects: [as_supervision(frame) for frame in sequences[objects]] for objects in sizes}
    trackers = {objects: Tracker(TrackConfig()) for objects in sizes}
    peers = {objects: ByteTrackTracker(frame_rate=FPS) for objects in sizes}
    for objects in sizes:
        for index in range(WARM_UP):
            trackers[objects].update(sequences[objects][index], index / FPS, (WIDTH, HEIGHT))
            peers[objects].update(peer_sequences[objects][index], timestamp=index / FPS)

    def time_ours(objects: int, indices: range) -> tuple[float, int]:
        times, update = [], None
        for index in indices:
            start = time.perf_counter()
            update = trackers[objects].update(sequences[objects][index], index / FPS, (WIDTH, HEIGHT))
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1000, len(update.objects) if update else 0

    def time_theirs(objects: int, indices: range) -> tuple[float, int]:
        times, result = [], None
        for index in indices:
            start = time.perf_counter()
            result = peers[objects].update(peer_sequences[objects][index], timestamp=index / FPS)
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1000, int((result.tracker_id >= 0).sum()) if result else 0

    ours: dict[int, list[float]] = {objects: [] for objects in sizes}
    theirs: dict[int, list[float]] = {objects: [] for objects in sizes}
    reported = dict.fromkeys(sizes, (0, 0))
    for round_number in range(rounds):
        indices = range(WARM_UP + round_number * frames, WARM_UP + (round_number + 1) * frames)
        for objects in sizes:
            if round_number % 2 == 0:
                our_ms, our_count = time_ours(objects, indices)
                their_ms, their_count = time_theirs(objects, indices)
            else:
                their_ms, their_count = time_theirs(objects, indices)
                our_ms, our_count = time_ours(objects, indices)
            ours[objects].append(our_ms)
            theirs[objects].append(their_ms)
            reported[objects] = (our_count, their_count)
    return {objects: (ours[objects], theirs[objects], reported[objects]) for objects in sizes}


def require_trackers() -> str:
    """The installed `trackers` version; exits saying where to find it when this environment lacks it."""
    try:
        import trackers  # noqa: F401
    except ImportError as error:
        raise SystemExit(PEERS_MISSING.format(error=error)) from None
    return version("trackers")


def print_peer_comparison(rounds: int, frames: int) -> None:
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"\nagainst roboflow trackers {require_trackers()} ByteTrackTracker (load average before: {load})")
    print("| objects | reported: ours / ByteTrack | ours ms | ByteTrack ms | ByteTrack / ours | rounds' ratios |")
    print("|---:|---:|---:|---:|---:|---:|")
    for objects, (ours, theirs, reported) in peer_update_times_ms(sorted(GOALS_MS), rounds, frames).items():
        ratios = [their / our for our, their in zip(ours, theirs, strict=True)]
        print(
            f"| {objects} | {reported[0]} / {reported[1]} | {statistics.median(ours):.3f} | "
            f"{statistics.median(theirs):.3f} | {statistics.median(ratios):.1f}× | "
            f"{min(ratios):.1f}–{max(ratios):.1f} |"
        )
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"goal: ours at least {PEER_GOAL:g}× faster; ratio: median of the rounds' ratios; load average after: {load}")


def random_zones(count: int, rng: np.random.Generator) -> dict[str, ZoneConfig]:
    """`count` convex polygons of 4 to 8 corners, each about a tenth of the frame, anywhere in it."""
    zones = {}
    for number in range(count):
        corners = int(rng.integers(4, 9))
        angles = np.sort(rng.uniform(0, 2 * np.pi, corners))
        radius = rng.uniform(0.12, 0.22)
        centre = rng.uniform(radius, 1 - radius, 2)
        polygon = centre + radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)
        zones[f"zone{number}"] = ZoneConfig(polygon=[(float(x), float(y)) for x, y in polygon], inertia=3)
    return zones


def random_lines(count: int, rng: np.random.Generator) -> dict[str, LineConfig]:
    """`count` segments a fifth to a half of the frame long, anywhere in it."""
    lines = {}
    for number in range(count):
        length, angle = rng.uniform(0.2, 0.5), rng.uniform(0, np.pi)
        step = 0.5 * length * np.array([np.cos(angle), np.sin(angle)])
        centre = rng.uniform(np.abs(step), 1 - np.abs(step))
        start, end = centre - step, centre + step
        points = [(float(start[0]), float(start[1])), (float(end[0]), float(end[1]))]
        lines[f"line{number}"] = LineConfig(points=points, inbound="left", hold_frames=2)
    return lines


def place_times_ms(rounds: int, frames: int) -> tuple[dict[str, list[float]], int, int, int, int]:
    """The median per-frame time of each round for zones, lines, events and all three; the objects reported
    in the last frame; and over the timed frames, the zones entered by objects that ended, the crossings
    counted and the event messages."""
    objects, zone_count, line_count = PLACES
    detections = frames_of(objects, WARM_UP + rounds * frames)
    tracker = Tracker(TrackConfig())
    updates: list[TrackUpdate] = [
        tracker.update(frame, index / FPS, (WIDTH, HEIGHT)) for index, frame in enumerate(detections)
    ]
    rng = np.random.default_rng(1)
    zones, lines = Zones(random_zones(zone_count, rng)), Lines(random_lines(line_count, rng), 0.0)
    events = ObjectEvents(EventsConfig(), "bench")
    for update in updates[:WARM_UP]:
        report = zones.update_from(update, (WIDTH, HEIGHT))
        lines.update_from(update, (WIDTH, HEIGHT))
        events.update(update, report.objects | report.ended, (WIDTH, HEIGHT))
    medians: dict[str, list[float]] = {"zones": [], "lines": [], "events": [], "zones + lines + events": []}
    entries = crossings = messages = 0
    for round_number in range(rounds):
        times: dict[str, list[float]] = {"zones": [], "lines": [], "events": []}
        for offset in range(frames):
            update = updates[WARM_UP + round_number * frames + offset]
            start = time.perf_counter()
            report = zones.update_from(update, (WIDTH, HEIGHT))
            zoned = time.perf_counter()
            crossed = lines.update_from(update, (WIDTH, HEIGHT))
            lined = time.perf_counter()
            told = events.update(update, report.objects | report.ended, (WIDTH, HEIGHT))
            end = time.perf_counter()
            times["zones"].append(zoned - start)
            times["lines"].append(lined - zoned)
            times["events"].append(end - lined)
            entries += sum(len(zones_of.entered) for zones_of in report.ended.values())
            crossings += len(crossed)
            messages += len(told.messages)
        for part, taken in times.items():
            medians[part].append(statistics.median(taken) * 1000)
        together = [sum(parts) for parts in zip(*times.values(), strict=True)]
        medians["zones + lines + events"].append(statistics.median(together) * 1000)
    return medians, len(updates[-1].objects), entries, crossings, messages


def import_costs(count: int, preload: str) -> tuple[float, float, list[str]]:
    """Median wall time (ms) and resident memory (MB) that importing the package adds after `preload`, over
    `count` fresh interpreters, and the heavy modules any of them loaded."""
    environment = dict(os.environ, PYTHONPATH=str(REPO))
    probe = IMPORT_PROBE % (preload, HEAVY)
    runs = []
    for _ in range(count):
        output = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=environment
        )
        runs.append(json.loads(output.stdout))
    heavy = sorted({name for run in runs for name in run["heavy"]})
    return statistics.median(run["ms"] for run in runs), statistics.median(run["mb"] for run in runs), heavy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--imports", type=int, default=7)
    parser.add_argument(
        "--peers",
        action="store_true",
        help="also time roboflow's ByteTrackTracker beside ours; needs `trackers`, in the peers environment only",
    )
    args = parser.parse_args()
    if args.peers:
        require_trackers()
    peers = " --peers" if args.peers else ""
    command = f"python bench/tracking.py --rounds {args.rounds} --frames {args.frames} --imports {args.imports}{peers}"
    print(f"command: {command}")
    print(f"{WIDTH}×{HEIGHT} at {FPS:g} fps, one thread; median of {args.rounds} rounds × {args.frames} updates\n")
    print("| objects | objects reported | update ms (median of rounds) | rounds min–max ms | goal ms |")
    print("|---:|---:|---:|---:|---:|")
    for objects, (medians, reported) in update_times_ms(sorted(GOALS_MS), args.rounds, args.frames).items():
        print(
            f"| {objects} | {reported} | {statistics.median(medians):.3f} | "
            f"{min(medians):.3f}–{max(medians):.3f} | ≤ {GOALS_MS[objects]} |"
        )
    if args.peers:
        print_peer_comparison(args.rounds, args.frames)
    medians, present, entries, crossings, messages = place_times_ms(args.rounds, args.frames)
    objects, zone_count, line_count = PLACES
    print(
        f"\nzones, lines and events: {objects} objects in the scene ({present} reported at the end), {zone_count} "
        f"zones, {line_count} lines; {entries} zone entries by objects that ended, {crossings} crossings counted, "
        f"{messages} event messages"
    )
    print("| part | per frame ms (median of rounds) | rounds min–max ms |")
    print("|---|---:|---:|")
    for part, times in medians.items():
        print(f"| {part} | {statistics.median(times):.3f} | {min(times):.3f}–{max(times):.3f} |")
    print(f"goal: zones, lines and events together ≤ {PLACES_GOAL_MS} ms per frame")
    milliseconds, megabytes, heavy = import_costs(args.imports, ALREADY_LOADED)
    print(f"\nimport edge_runtime.tracking after numpy, pydantic and the config base ({args.imports} interpreters):")
    print(f"{milliseconds:.1f} ms (goal ≤ {IMPORT_GOALS[0]:g}), +{megabytes:.1f} MB RSS (goal ≤ {IMPORT_GOALS[1]:g})")
    print(f"heavy modules loaded: {', '.join(heavy) if heavy else 'none'}")
    milliseconds, megabytes, _ = import_costs(args.imports, "")
    print(
        f"for reference, from a bare interpreter (numpy and pydantic too): {milliseconds:.0f} ms, +{megabytes:.1f} MB"
    )


if __name__ == "__main__":
    main()
