"""How long `edge-convert` takes with its defaults, how much a warm cache saves, and how good its ETA is.

The goals: a default conversion of a model of at most 5 MB with 300 calibration images within 3 minutes
of wall time on 2 cores, int8 recovery included within its budget; the same conversion again, with the
cache warm, within 1 minute; and the ETA shown after the first minute within ±30% of the time that was
actually left. Until openvino/int8 has been measured, the ETA cannot know whether recovery will run: it
then leaves recovery out and says what it may add (`+ up to 2:00 if int8 needs recovery`); such lines are
not counted, nor lines with less than 5 s left, where a second of rounding is already 20%.

The models are MediaPipe's landmark models of at most 5 MB (Apache-2.0: the face landmark model, 1.2 MB at
192×192, and the lite hand landmark model, 2.1 MB at 224×224) out of the `mediapipe==0.10.14` wheel, calibrated
on 300 random crops of scikit-image's photos fed as MediaPipe feeds them (RGB scaled to [0, 1]), as in
bench/int8_recovery.py. Each is converted three times by the real command line, `python -m converters.cli`,
as a user runs it: with an empty cache, again with the cache it left (another output folder), and with
`--quick`. Wall time is measured around the process, Python's start included. The ETA is read from the
plain progress lines (`[elapsed, ETA left]`) as they arrive, and compared with the time the process really
ran on after each line.

    python bench/convert_time.py [--models face_landmark,hand_landmark_lite] [--runs cold,warm,quick]
                                 [--recovery-budget 2m] [--json out.json]

`--runs cold` converts each model once, with an empty cache: the run the ETA is judged on, in a third of
the time. `--recovery-budget` is passed to the cold and warm runs; a budget longer than accuracy control
needs (`10m`) lets its iteration cap end it, which is what a faster or quieter machine sees with the default.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

from int8_recovery import MODELS, calibration, model_file  # noqa: E402

CACHE = BENCH / ".cache" / "convert_time"
ETA_LINE = re.compile(r"^edge-convert: \[(\d+):(\d\d), ETA (\?|(\d+):(\d\d))( \+ up to [^\]]*)?\] (.*)$")
FIRST_MINUTE = 60.0
GOAL_COLD_S, GOAL_WARM_S, GOAL_ETA = 180.0, 60.0, 0.30


def run(model: str, out_dir: Path, cache_dir: Path, extra: list[str]) -> dict[str, Any]:
    """One conversion by the command line; its wall time, and each progress line's ETA against what was left."""
    _, size = MODELS[model]
    command = [
        sys.executable,
        "-m",
        "converters.cli",
        str(model_file(model)),
        "-o",
        str(out_dir),
        "--overwrite",
        "--name",
        model,
        "--task",
        "keypoints",
        "--color-order",
        "RGB",
        "--mean",
        "0",
        "--std",
        "255",
        "--calibration",
        str(calibration(size, 0)),
        "--cache-dir",
        str(cache_dir),
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    # Seconds since start, the ETA shown (None while it is `?` or while it is open whether int8 needs recovery,
    # which the ETA then leaves out and names apart), and the message.
    lines: list[tuple[float, float | None, str]] = []
    with subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) as process:
        assert process.stderr is not None and process.stdout is not None
        for line in process.stderr:
            now = time.monotonic() - started
            match = ETA_LINE.match(line.rstrip("\n"))
            if match is None:
                continue
            complete = match.group(3) != "?" and match.group(6) is None
            eta = 60 * int(match.group(4)) + int(match.group(5)) if complete else None
            lines.append((now, eta, match.group(7)))
            print(f"{now:7.1f} s  {line.rstrip()}", file=sys.stderr)
        summary = process.stdout.read()
        status = process.wait()
    wall = time.monotonic() - started
    counted = [
        (at, eta, message) for at, eta, message in lines if eta is not None and at >= FIRST_MINUTE and wall - at >= 5
    ]
    errors = [(eta - (wall - at)) / (wall - at) for at, eta, _ in counted]
    return {
        "exit_status": status,
        "wall_s": round(wall, 1),
        "summary": summary.strip(),
        "eta_errors": [round(e, 3) for e in errors],
        "eta_worst": round(max(errors, key=abs), 3) if errors else None,
        "eta_median": round(statistics.median(errors), 3) if errors else None,
        "eta_within": round(sum(abs(e) <= GOAL_ETA for e in errors) / len(errors), 3) if errors else None,
        "stages": [(round(at, 1), eta, message) for at, eta, message in lines],
        # Each counted line: when, the ETA it showed, the time that was really left, and its message.
        "eta_lines": [(round(at, 1), eta, round(wall - at, 1), message) for at, eta, message in counted],
    }


def recovery_line(out_dir: Path) -> str:
    report = json.loads((out_dir / "report.json").read_text(encoding="utf-8"))
    int8 = next((v for v in report["variants"] if v["variant_id"] == "openvino/int8"), None)
    if int8 is None:
        return "no openvino/int8"
    drop = int8["drop"]["points"] if int8.get("drop") else None
    kept = next((f"{n} ({a['name']})" for n, a in enumerate(int8["attempts"], 1) if a["kept"]), "first try")
    note = int8.get("recovery_note") or "not needed"
    return f"drop {drop:.2f}, {'flagged' if int8['flagged'] else 'ok'}, kept {kept}; {note}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="face_landmark,hand_landmark_lite")
    parser.add_argument("--runs", default="cold,warm,quick", help="which of cold, warm and quick to run")
    parser.add_argument("--recovery-budget", help="passed to edge-convert (default: its own)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs_wanted = args.runs.split(",")
    unknown = set(runs_wanted) - {"cold", "warm", "quick"}
    if unknown or not runs_wanted:
        parser.error(f"--runs: unknown run(s) {', '.join(sorted(unknown))}; choose from cold, warm, quick")
    budget = ["--recovery-budget", args.recovery_budget] if args.recovery_budget else []
    results: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg(),
        "recovery_budget": args.recovery_budget or "default",
        "models": {},
    }
    for model in args.models.split(","):
        cache_dir = CACHE / f"{model}-cache"
        shutil.rmtree(cache_dir, ignore_errors=True)
        size = model_file(model).stat().st_size
        runs = {}
        for label, extra in (("cold", budget), ("warm", budget), ("quick", ["--quick", "--no-cache"])):
            if label not in runs_wanted:
                continue
            out_dir = CACHE / f"{model}-{label}"
            print(f"== {model}: {label}", file=sys.stderr)
            runs[label] = run(model, out_dir, cache_dir, extra)
            runs[label]["int8"] = recovery_line(out_dir)
        results["models"][model] = {"size_bytes": size, **runs}
    results["load_after"] = os.getloadavg()
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def table(results: dict[str, Any]) -> str:
    lines = [
        f"{results['cpus']} CPUs; load average before {results['load_before'][0]:.1f}, after "
        f"{results['load_after'][0]:.1f}; recovery budget {results['recovery_budget']}",
        "",
        "| model | size | default, cold cache (s) | again, warm cache (s) | --quick (s) | ETA error after 1 min, "
        "cold: median / worst / lines within ±30% | openvino/int8 |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for model, got in results["models"].items():
        walls = [f"{got[label]['wall_s']:.0f}" if label in got else "–" for label in ("cold", "warm", "quick")]
        cold = got.get("cold", {})
        eta, int8 = "–", cold.get("int8", "–")
        if cold.get("eta_median") is not None:
            eta = f"{cold['eta_median']:+.0%} / {cold['eta_worst']:+.0%} / {cold['eta_within']:.0%}"
        lines.append(f"| {model} | {got['size_bytes'] / 1e6:.1f} MB | {' | '.join(walls)} | {eta} | {int8} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
