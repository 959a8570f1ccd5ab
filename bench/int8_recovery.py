"""int8 recovery on a real MediaPipe landmark model: each attempt's drop, and int8 against fp32 on OpenVINO CPU.

The goal: openvino/int8 within 1 point of drop of the fp32 reference and at least 1.3× as fast as
openvino/fp32 on OpenVINO CPU, or a clear account of why not.

The model is one of MediaPipe's landmark models (Apache-2.0), taken from the `mediapipe==0.10.14` wheel as
samples/build_samples.py takes its detectors, and converted by `edge-convert` (`converters.pipeline.convert`)
into openvino/fp32 and openvino/int8, with recovery on. It is calibrated, and its drop measured, on 300
random crops of scikit-image's sample photos, fed as MediaPipe's graphs feed it: RGB scaled to [0, 1]
(`output_tensor_float_range {min: 0 max: 1}` of the ImageToTensorCalculator in FaceLandmarkCpu, HandLandmarkCpu
and PoseLandmarkByRoiCpu). The conversion prints every attempt, and the report lands in bench/.cache/.

Speed goes through the runtime's own `load_model`, `measure_latency` and `measure_throughput`, as `edge-runtime
bench` does, for openvino/fp32, the packaged openvino/int8 and the int8 of the first try (a second conversion
with recovery off), to show what the kept attempt traded for its accuracy. They alternate within every round, in
reversed order every other round, so that drift of a shared machine affects all alike; medians over the rounds
are reported. fp32 runs at f32, stated explicitly.

    python bench/int8_recovery.py [--model face_landmark] [--threshold 1] [--rounds 5] [--seconds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from quantized_package import calibration_photos, version  # noqa: E402
from quantized_speed import openvino_layers  # noqa: E402

from converters.describe import InputFlags  # noqa: E402
from converters.pipeline import ConvertOptions, convert  # noqa: E402
from converters.report import ConversionReport, VariantResult  # noqa: E402
from edge_runtime.backends.host import cpu_name  # noqa: E402
from edge_runtime.measure.benchmark import bench_feed, measure_latency, measure_throughput  # noqa: E402
from edge_runtime.package.loader import open_package  # noqa: E402
from edge_runtime.placement.model import load_model  # noqa: E402

CACHE = BENCH / ".cache" / "int8_recovery"
WHEEL = "mediapipe==0.10.14"
MODELS = {  # wheel member, input size
    "face_landmark": ("mediapipe/modules/face_landmark/face_landmark.tflite", 192),
    "hand_landmark_full": ("mediapipe/modules/hand_landmark/hand_landmark_full.tflite", 224),
    "hand_landmark_lite": ("mediapipe/modules/hand_landmark/hand_landmark_lite.tflite", 224),
    "pose_landmark_full": ("mediapipe/modules/pose_landmark/pose_landmark_full.tflite", 256),
}
VARIANTS = ("openvino/fp32", "openvino/int8")
FP32, KEPT, FIRST = "openvino/fp32", "openvino/int8 (packaged)", "openvino/int8 (first try, no recovery)"
GOAL_DROP, GOAL_SPEEDUP = 1.0, 1.3


def model_file(name: str) -> Path:
    """The .tflite out of the mediapipe wheel, downloaded once into bench/.cache/."""
    member, _ = MODELS[name]
    target = CACHE / Path(member).name
    if target.exists():
        return target
    wheels = CACHE / "wheels"
    if not any(wheels.glob("mediapipe-*.whl")):
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(wheels), WHEEL]
        subprocess.run(pip, check=True)
    with zipfile.ZipFile(next(wheels.glob("mediapipe-*.whl"))) as archive:
        target.write_bytes(archive.read(member))
    return target


def calibration(size: int, seed: int) -> Path:
    folder = CACHE / f"calibration-{size}-seed{seed}"
    if len(list(folder.glob("*.png"))) < 300:
        shutil.rmtree(folder, ignore_errors=True)
        calibration_photos(folder, seed, size=size)
    return folder


def convert_model(name: str, args: argparse.Namespace, recover: bool) -> tuple[ConversionReport, Path]:
    """The package with recovery; without it, the first try alone, to time what recovery traded for accuracy."""
    _, size = MODELS[name]
    out_dir = CACHE / f"{name}-package" if recover else CACHE / f"{name}-first-try"
    options = ConvertOptions(
        model=model_file(name),
        out_dir=out_dir,
        name=name,
        task="keypoints",
        input_flags=InputFlags(color_order="RGB", mean=(0.0,), std=(255.0,)),
        calibration=calibration(size, args.seed),
        variants=VARIANTS if recover else ("openvino/int8",),
        drop_threshold=args.threshold,
        bench_seconds=args.bench_seconds if recover else 0,
        overwrite=True,
        recover=recover,
    )
    return convert(options), out_dir


Side = tuple[str, Path, str]  # label, package, variant


def speed(side: Side, hint: str, seconds: float) -> float:
    """Median latency (ms) under the latency hint, or throughput (FPS) under the throughput hint."""
    _, package, variant = side
    precision = "int8" if variant.endswith("int8") else "fp32"
    model = load_model(open_package(package), variant, "openvino", {"hint": hint, "precision": precision})
    try:
        feed = bench_feed(model)
        if hint == "latency":
            return measure_latency(model, feed, seconds).median_ms
        return measure_throughput(model, feed, seconds).throughput_fps
    finally:
        model.close()


def side_by_side(sides: list[Side], rounds: int, seconds: float) -> dict[str, dict[str, list[float]]]:
    values: dict[str, dict[str, list[float]]] = {label: {"latency": [], "throughput": []} for label, _, _ in sides}
    for index in range(rounds):
        order = sides if index % 2 == 0 else sides[::-1]
        for hint in ("latency", "throughput"):
            for side in order:
                print(f"round {index + 1}/{rounds}: {side[0]} {hint}", file=sys.stderr)
                values[side[0]][hint].append(speed(side, hint, seconds))
    return values


def attempts_table(report: ConversionReport) -> list[str]:
    int8 = _int8(report)
    lines = [
        "| # | attempt | preset | fast bias correction | accuracy control | drop (points) | latency median ms "
        "| throughput FPS | layers kept in fp32 | status |",
        "|---|---|---|---|---|---:|---:|---:|---:|---|",
    ]
    for number, a in enumerate(int8.attempts, 1):
        control = a.settings.get("accuracy_control")
        limit = f"{control}, max drop {a.settings.get('max_drop')}" if control else "–"
        status = a.status + (f": {a.message}" if a.message else "") + (" (kept)" if a.kept else "")
        lines.append(
            f"| {number} | {a.name} | {a.settings.get('preset')} | {a.settings.get('fast_bias_correction')} | {limit} "
            f"| {_fmt(a.drop_points)} | {_fmt(a.latency_median_ms, 3)} | {_fmt(a.throughput_fps, 1)} "
            f"| {len(a.layers_fp32)} | {status} |"
        )
    if not int8.attempts:
        lines.append(f"| 1 | initial | | | | {_fmt(int8.drop.points if int8.drop else None)} | | | | not flagged |")
    for number, a in enumerate(int8.attempts, 1):
        if a.layers_fp32:
            lines += ["", f"Layers attempt {number} kept in fp32: " + ", ".join(f"`{x}`" for x in a.layers_fp32)]
    return lines


def outputs_table(packaged: ConversionReport, first_try: ConversionReport) -> list[str]:
    """Each output's mean error in % of its fp32 range: the drop is the largest of them."""
    lines = ["", "| output | first try: error % of range | packaged: error % of range |", "|---|---:|---:|"]
    first, kept = _int8(first_try).agreement, _int8(packaged).agreement
    if first is None or kept is None:
        return []
    for a, b in zip(first.outputs, kept.outputs, strict=True):
        lines.append(f"| {a.name} | {100 * a.relative_mean_error:.3f} | {100 * b.relative_mean_error:.3f} |")
    return lines


def _int8(report: ConversionReport) -> VariantResult:
    return next(r for r in report.variants if r.variant_id == "openvino/int8")


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def summary(report: ConversionReport, values: dict[str, dict[str, list[float]]], checks: dict[str, str]) -> list[str]:
    int8 = _int8(report)
    drop = int8.drop.points if int8.drop is not None else None
    medians = {label: {hint: statistics.median(v) for hint, v in got.items()} for label, got in values.items()}
    fp32 = medians[FP32]
    lines = [
        "",
        f"Final openvino/int8 drop: {_fmt(drop)} points ({int8.drop.metric if int8.drop else 'not measured'}); "
        f"{'flagged' if int8.flagged else 'within the threshold'}",
        "",
        "| model | latency median ms | throughput FPS | latency × fp32 | throughput × fp32 "
        "| rounds: latency ms / FPS |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, got in values.items():
        rounds = " ".join(f"{x:.3f}" for x in got["latency"]) + " / " + " ".join(f"{x:.0f}" for x in got["throughput"])
        latency, throughput = medians[label]["latency"], medians[label]["throughput"]
        lines.append(
            f"| {label} | {latency:.3f} | {throughput:.1f} | {fp32['latency'] / latency:.2f}× "
            f"| {throughput / fp32['throughput']:.2f}× | {rounds} |"
        )
    kept = medians[KEPT]
    ratio = min(fp32["latency"] / kept["latency"], kept["throughput"] / fp32["throughput"])
    met_drop = drop is not None and drop <= GOAL_DROP
    lines += [
        "",
        f"Goals for the packaged openvino/int8: drop ≤ {GOAL_DROP:g} point {'met' if met_drop else 'NOT met'}; "
        f"≥ {GOAL_SPEEDUP:g}× fp32 (the smaller of the two ratios, {ratio:.2f}×) "
        f"{'met' if ratio >= GOAL_SPEEDUP else 'NOT met'}",
        "",
        "Compiled CPU graph, compute layers by runtime precision (kernel):",
        "",
        *(f"- {label}: {found}" for label, found in checks.items()),
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=list(MODELS), default="face_landmark")
    parser.add_argument("--threshold", type=float, default=GOAL_DROP, help="edge-convert's --drop-threshold")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per latency or throughput measurement")
    parser.add_argument("--bench-seconds", type=float, default=2.0, help="the converter's own speed measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.rounds < 1 or args.seconds <= 0:
        parser.error("--rounds and --seconds must be positive")
    report, package = convert_model(args.model, args, recover=True)
    missing = set(VARIANTS) - set(open_package(package).manifest.variants)
    if missing:
        raise SystemExit(f"the converter did not package {', '.join(sorted(missing))}: see {package / 'report.md'}")
    first_report, first_try = convert_model(args.model, args, recover=False)
    sides = [(FP32, package, "openvino/fp32"), (KEPT, package, "openvino/int8"), (FIRST, first_try, "openvino/int8")]
    values = side_by_side(sides, args.rounds, args.seconds)
    checks = {label: openvino_layers(open_package(root).source(variant).path) for label, root, variant in sides}
    flags = [f for f in ("avx512_vnni", "avx_vnni", "amx_int8") if f in Path("/proc/cpuinfo").read_text()]
    context = {
        "Command": "`" + shlex.join(["python", f"bench/{Path(__file__).name}", *sys.argv[1:]]) + "`",
        "Model": f"MediaPipe {args.model} ({WHEEL}), {MODELS[args.model][1]}×{MODELS[args.model][1]} RGB in [0, 1]",
        "Calibration and evaluation": "300 random crops and flips of scikit-image's sample photos",
        "CPU": f"{cpu_name()}, {len(os.sched_getaffinity(0))} cores, {', '.join(flags) or 'no VNNI or AMX'}",
        "Versions": f"OpenVINO {version('openvino')}, NNCF {version('nncf')}",
        "Speed": f"{args.rounds} rounds × {args.seconds:g} s per measurement, medians, fp32 and int8 alternating",
    }
    lines = [f"{key}: {value}  " for key, value in context.items()]
    lines += ["", f"Attempts on openvino/int8 (threshold {args.threshold:g} points):", "", *attempts_table(report)]
    lines += outputs_table(report, first_report)
    lines += summary(report, values, checks)
    print("\n".join(lines))
    if args.json:
        data: dict[str, Any] = {"context": context, "speed": values, "checks": checks}
        data["attempts"] = [asdict(a) for r in report.variants for a in r.attempts]
        args.json.write_text(json.dumps(data, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
