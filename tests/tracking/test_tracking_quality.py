"""How well the tracker follows many objects: CLEAR-MOT and IDF1 on synthetic scenes at 5, 10 and 30 fps.

The tracker's parameters were tuned on seeds 0-9 only. The thresholds below were written down before the
first run on the held-out seeds 100-119, slightly under what seeds 0-9 gave (5 fps: MOTA 0.878, IDF1
0.932, 0.47 switches per 1000 boxes; 10 fps: 0.900, 0.947, 0.12; 30 fps: 0.913, 0.954, 0.04). MOTA cannot
come near 1 here: the simulated detector misses 8 % of the visible objects and scores others too weakly to
be reported, and only objects matched in a frame are scored (the standard protocol), so each miss counts.

The first held-out run met every threshold but one: 2.68 identity switches per 1000 boxes at 5 fps against
2.0 (MOTA 0.874, IDF1 0.916; 10 fps 0.895, 0.932, 0.77; 30 fps 0.908, 0.938, 0.17). That one is kept as an
expected failure rather than loosened.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import pytest
from mot_metrics import MotResult, evaluate
from synthetic_scenes import HEIGHT, WIDTH, SceneSettings, scene

from edge_runtime.tracking import TrackConfig, Tracker
from edge_runtime.tracking.association import iou_matrix

HELD_OUT = range(100, 120)
TUNING = range(10)
# fps: (minimum MOTA, minimum IDF1, maximum identity switches per 1000 ground-truth boxes)
THRESHOLDS = {5: (0.85, 0.90, 2.0), 10: (0.87, 0.92, 1.0), 30: (0.88, 0.93, 0.5)}


def track_scenes(seeds: range, fps: float, config: TrackConfig) -> MotResult:
    totals: dict[str, int] = {}
    for seed in seeds:
        tracker = Tracker(config)
        frames = []
        for frame in scene(seed, SceneSettings(fps=fps)):
            update = tracker.update(frame.detections, frame.timestamp, (WIDTH, HEIGHT))
            frames.append((frame.truth, {o.id: o.box for o in update.objects if o.seen}))
        for name, value in vars(evaluate(frames)).items():
            totals[name] = totals.get(name, 0) + value
    return MotResult(**totals)


@functools.cache
def held_out(fps: int, relative_distance: float = 2.5) -> MotResult:
    return track_scenes(HELD_OUT, fps, TrackConfig.model_validate({"match": {"relative_distance": relative_distance}}))


@pytest.mark.parametrize("fps", sorted(THRESHOLDS))
def test_held_out_scenes_reach_the_mota_and_idf1_thresholds(fps: int) -> None:
    result = held_out(fps)
    min_mota, min_idf1, _ = THRESHOLDS[fps]
    summary = f"MOTA {result.mota:.3f}, IDF1 {result.idf1:.3f}"
    assert result.mota >= min_mota and result.idf1 >= min_idf1, summary


@pytest.mark.parametrize(
    "fps",
    [
        pytest.param(
            5,
            marks=pytest.mark.xfail(
                strict=True,
                reason="at 5 fps the tracker makes 2.68 identity switches per 1000 boxes on seeds 100-119 "
                "(24 in 8970), above the goal of 2.0: an object hidden behind a faster one in its lane, and a "
                "flickering false detection beside an occluded one, still take each other's ids",
            ),
        ),
        10,
        30,
    ],
)
def test_held_out_scenes_stay_under_the_identity_switch_threshold(fps: int) -> None:
    result = held_out(fps)
    switches = THRESHOLDS[fps][2]
    assert result.switches_per_1000 <= switches, f"{result.id_switches} switches in {result.ground_truth} boxes"


def test_the_second_chance_keeps_ids_at_5_fps() -> None:
    with_it, without = held_out(5), held_out(5, relative_distance=0)
    assert with_it.idf1 >= without.idf1 + 0.01
    assert with_it.id_switches < without.id_switches


@pytest.mark.parametrize("seed", TUNING)
def test_the_scenes_hold_what_makes_tracking_hard(seed: int) -> None:
    settings = SceneSettings(fps=5)
    frames = scene(seed, settings)
    intervals = np.diff([f.timestamp for f in frames])
    assert intervals.min() < 0.85 / settings.fps and intervals.max() > 1.5 / settings.fps  # jitter, drops
    found = missed = weak = false = crossings = 0
    for frame in frames:
        truth = np.array(list(frame.truth.values()), dtype=np.float64).reshape(-1, 4)
        boxes = np.array([d.box for d in frame.detections], dtype=np.float64).reshape(-1, 4)
        overlap = iou_matrix(truth, boxes)
        matched = overlap.max(axis=1, initial=0.0) >= 0.5
        found, missed = found + int(matched.sum()), missed + int((~matched).sum())
        false += int((overlap.max(axis=0, initial=0.0) < 0.3).sum())
        best = overlap.max(axis=0, initial=0.0)
        weak += sum(d.score < 0.5 for d, hit in zip(frame.detections, best, strict=True) if hit >= 0.5)
        among_truth = iou_matrix(truth, truth)
        crossings += int((np.triu(among_truth, 1) > 0.1).sum())
    assert 0.04 < missed / (found + missed) < 0.2
    assert weak > 0 and false > 0 and crossings > 0


def test_the_same_seed_is_the_same_scene_at_every_frame_rate() -> None:
    slow, fast = scene(3, SceneSettings(fps=5)), scene(3, SceneSettings(fps=30))
    assert len(fast) > 5 * len(slow)
    steady = replace(SceneSettings(fps=5), dropped_rate=0.0, jitter=0.0)
    again = replace(SceneSettings(fps=30), dropped_rate=0.0, jitter=0.0)
    early, late = scene(3, steady), scene(3, again)
    assert early[10].timestamp == pytest.approx(late[60].timestamp)
    assert early[10].truth.keys() == late[60].truth.keys()
    assert all(np.allclose(box, late[60].truth[number]) for number, box in early[10].truth.items())
