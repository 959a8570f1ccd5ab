"""The tracker's quality against roboflow's `ByteTrackTracker` on synthetic scenes: the table in
docs/performance.md, and how ByteTrack's settings were chosen.

Both trackers run as tests/peers/tracking_runs.py describes, on the scenes of tests/tracking/synthetic_scenes.py,
scored by tests/tracking/mot_metrics.py (IoU 0.5; tests/peers/test_tracking_peers.py checks it against
`trackers.eval`). By default: the acceptance seeds 200-239 at 5, 10 and 30 fps, for edge_runtime with its
defaults, ByteTrack as tuned for the rate, and ByteTrack with every threshold at its default. With
`--tune`: every setting of `tracking_runs.search()` on the tuning seeds 0-9, and the one with the highest
IDF1 at each rate (ties to the first tried, its defaults coming first); about 5 minutes on two cores.
Only the peers environment has `trackers`:

    .venv-peers/bin/python bench/tracking_quality.py [--tune]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS / "peers"), str(TESTS / "tracking")]

from mot_metrics import MotResult  # noqa: E402

try:
    from tracking_runs import (
        ACCEPTANCE,
        BYTETRACK_DEFAULTS,
        FRAME_RATES,
        TUNING,
        acceptance_runs,
        bytetrack,
        ours,
        search,
        totals,
    )
except ImportError as error:
    raise SystemExit(
        f"this compares with roboflow's `trackers`, which this environment lacks ({error}); it is installed in "
        "the peers environment only:\n    make .venv-peers/.installed-stamp\n"
        "    .venv-peers/bin/python bench/tracking_quality.py"
    ) from None

HEADER = (
    "| fps | tracker | MOTA | IDF1 | identity switches | per 1000 boxes | false positives | misses | boxes |\n"
    "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
)


def row(fps: int, name: str, result: MotResult) -> str:
    return (
        f"| {fps} | {name} | {result.mota:.3f} | {result.idf1:.3f} | {result.id_switches} | "
        f"{result.switches_per_1000:.2f} | {result.false_positives} | {result.misses} | {result.ground_truth} |"
    )


def acceptance() -> None:
    print(f"acceptance seeds {ACCEPTANCE.start}-{ACCEPTANCE.stop - 1}\n{HEADER}")
    for fps in FRAME_RATES:
        print(row(fps, "edge_runtime", totals(acceptance_runs(fps, "edge_runtime"))), flush=True)
        print(row(fps, "ByteTrack, tuned", totals(acceptance_runs(fps, "bytetrack"))), flush=True)
        defaults = totals([bytetrack(seed, fps, BYTETRACK_DEFAULTS) for seed in ACCEPTANCE])
        print(row(fps, "ByteTrack, its defaults", defaults), flush=True)


def tune() -> None:
    print(f"tuning seeds {TUNING.start}-{TUNING.stop - 1}\n{HEADER}")
    for fps in FRAME_RATES:
        print(row(fps, "edge_runtime", totals([ours(seed, fps) for seed in TUNING])), flush=True)
        best = None
        for settings in search():
            result = totals([bytetrack(seed, fps, settings) for seed in TUNING])
            print(row(fps, f"ByteTrack {settings.arguments()}", result), flush=True)
            if best is None or result.idf1 > best[0].idf1:
                best = (result, settings)
        assert best is not None
        print(f"best at {fps} fps: {best[1]}\n{row(fps, 'ByteTrack, best', best[0])}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tune", action="store_true", help="choose ByteTrack's settings on the tuning seeds")
    if parser.parse_args().tune:
        tune()
    else:
        acceptance()


if __name__ == "__main__":
    main()
