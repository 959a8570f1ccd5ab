"""Synthetic camera scenes with ground truth: people and cars crossing a 1280×720 frame, and a detector's
mistakes on top.

Motion is defined in seconds, so the same seed gives the same scene at 5, 10 and 30 fps; only the
sampling differs, which makes low frame rates harder exactly as they are on a real camera (an object
moves further between analysed frames). What the simulated detector does wrong:

- box noise proportional to the object's size;
- misses (a visible object not detected), and weak scores now and then (a person in shade);
- occlusion at crossings: the object further away (smaller bottom y) is hidden while a nearer one covers
  most of it, detected weakly while half covered;
- false positives: random boxes in random frames, and one spot (a swaying bush) that fires in about a
  third of the frames with middling scores, the kind Frigate's median-score rule is for;
- irregular capture times: each frame's time jitters by up to a quarter of the interval, and some frames
  are dropped before analysis (as `max_fps` and the `latest` policy drop them).

Objects pause now and then (a person stopping at a door) and grow as they come nearer the camera.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edge_runtime.decoders.decoded import Detection

WIDTH, HEIGHT = 1280, 720
SIZES = {"person": ((40.0, 60.0), (100.0, 150.0)), "car": ((160.0, 240.0), (80.0, 120.0))}  # width, height px
SPEEDS = {"person": (40.0, 140.0), "car": (120.0, 320.0)}  # px/s
LANES = {"person": (430.0, 520.0, 610.0, 700.0), "car": (330.0, 420.0)}  # bottom y of a path, px

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class SceneSettings:
    fps: float
    duration_s: float = 20.0
    objects: int = 10
    miss_rate: float = 0.08
    weak_rate: float = 0.08  # a detected object scoring 0.15-0.45
    box_noise: float = 0.03  # standard deviation of each coordinate, as a fraction of the size
    false_positives_per_frame: float = 0.3
    flicker_rate: float = 0.35  # how often the bush fires
    dropped_rate: float = 0.05
    jitter: float = 0.25  # fraction of the frame interval


@dataclass(frozen=True)
class Mover:
    """One object's path: a straight line in a lane, with a sideways sway and maybe one pause."""

    number: int
    label: str
    size: tuple[float, float]
    enter_s: float
    start_x: float
    lane_y: float
    velocity: tuple[float, float]
    sway: tuple[float, float]  # amplitude px, period s
    pause: tuple[float, float]  # start (s after entering), duration s; duration 0: no pause

    def box_at(self, t: float) -> Box | None:
        """Its full box at time t (may extend past the frame), or None before it enters."""
        if t < self.enter_s:
            return None
        elapsed = t - self.enter_s
        pause_start, pause_length = self.pause
        travel = elapsed - min(max(elapsed - pause_start, 0.0), pause_length)
        x = self.start_x + self.velocity[0] * travel
        y = self.lane_y + self.velocity[1] * travel + self.sway[0] * math.sin(2 * math.pi * travel / self.sway[1])
        scale = 0.6 + 0.5 * y / HEIGHT  # nearer the camera (lower in the frame), larger
        width, height = self.size[0] * scale, self.size[1] * scale
        return (x - width / 2, y - height, x + width / 2, y)


@dataclass(frozen=True)
class SyntheticFrame:
    timestamp: float
    truth: dict[int, Box]  # visible objects: number -> box clipped to the frame
    detections: list[Detection]


def movers(seed: int, settings: SceneSettings) -> list[Mover]:
    rng = np.random.default_rng(seed)
    found = []
    for number in range(settings.objects):
        label = "person" if rng.random() < 0.65 else "car"
        widths, heights = SIZES[label]
        size = (float(rng.uniform(*widths)), float(rng.uniform(*heights)))
        speed = float(rng.uniform(*SPEEDS[label]))
        rightwards = rng.random() < 0.5
        margin = size[0]
        pausing = label == "person" and rng.random() < 0.3
        found.append(
            Mover(
                number=number,
                label=label,
                size=size,
                enter_s=float(rng.uniform(0, settings.duration_s * 0.7)),
                start_x=-margin / 2 if rightwards else WIDTH + margin / 2,
                lane_y=float(rng.choice(LANES[label]) + rng.uniform(-15, 15)),
                velocity=(speed if rightwards else -speed, float(rng.uniform(-8, 8))),
                sway=(float(rng.uniform(0, 12)), float(rng.uniform(2, 6))),
                pause=(float(rng.uniform(1, 5)), float(rng.uniform(2, 6)) if pausing else 0.0),
            )
        )
    return found


def scene(seed: int, settings: SceneSettings) -> list[SyntheticFrame]:
    """The analysed frames of one scene, with ground truth and the simulated detector's output."""
    objects = movers(seed, settings)
    rng = np.random.default_rng(seed * 1000 + round(settings.fps * 10))
    bush = (900.0, 380.0, 950.0, 500.0)
    interval = 1.0 / settings.fps
    frames = []
    for index in range(round(settings.duration_s * settings.fps)):
        if rng.random() < settings.dropped_rate:
            continue
        t = index * interval + float(rng.uniform(-settings.jitter, settings.jitter)) * interval
        boxes = {m.number: b for m in objects if (b := m.box_at(t)) is not None}
        truth: dict[int, Box] = {}
        detections: list[Detection] = []
        for mover in objects:
            full = boxes.get(mover.number)
            if full is None:
                continue
            clipped = _clip(full)
            if clipped is None or _area(clipped) < 0.4 * _area(full):
                continue
            covered = max(
                (_covered_fraction(clipped, b) for n, b in boxes.items() if n != mover.number and b[3] > full[3]),
                default=0.0,
            )
            if covered > 0.6:
                continue  # hidden: not ground truth either, no detector could see it
            truth[mover.number] = clipped
            if rng.random() < settings.miss_rate:
                continue
            score = float(np.clip(rng.normal(0.82, 0.08), 0.5, 0.99))
            if rng.random() < settings.weak_rate or covered > 0.3:
                score = float(rng.uniform(0.15, 0.45))
            noisy = _noisy(clipped, settings.box_noise * (2 if covered > 0.3 else 1), rng)
            if noisy is not None:
                detections.append(Detection(mover.label, score, noisy))
        for _ in range(rng.poisson(settings.false_positives_per_frame)):
            x, y = float(rng.uniform(0, WIDTH - 60)), float(rng.uniform(0, HEIGHT - 120))
            box = (x, y, x + float(rng.uniform(30, 60)), y + float(rng.uniform(60, 120)))
            detections.append(Detection("person", float(rng.uniform(0.1, 0.7)), box))
        if rng.random() < settings.flicker_rate:
            noisy = _noisy(bush, 0.05, rng)
            if noisy is not None:
                detections.append(Detection("person", float(np.clip(rng.normal(0.55, 0.1), 0.1, 0.8)), noisy))
        order = rng.permutation(len(detections))
        frames.append(SyntheticFrame(t, truth, [detections[i] for i in order]))
    return frames


def _clip(box: Box) -> Box | None:
    x0, y0, x1, y1 = max(box[0], 0.0), max(box[1], 0.0), min(box[2], WIDTH), min(box[3], HEIGHT)
    return (x0, y0, x1, y1) if x1 - x0 > 2 and y1 - y0 > 2 else None


def _area(box: Box) -> float:
    return (box[2] - box[0]) * (box[3] - box[1])


def _covered_fraction(box: Box, cover: Box) -> float:
    width = min(box[2], cover[2]) - max(box[0], cover[0])
    height = min(box[3], cover[3]) - max(box[1], cover[1])
    return max(width, 0.0) * max(height, 0.0) / _area(box)


def _noisy(box: Box, noise: float, rng: np.random.Generator) -> Box | None:
    width, height = box[2] - box[0], box[3] - box[1]
    shift = rng.normal(0, noise, 4) * np.array([width, height, width, height])
    return _clip((box[0] + shift[0], box[1] + shift[1], box[2] + shift[2], box[3] + shift[3]))
