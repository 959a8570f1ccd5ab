"""edge's endpoint from two checkouts of the project, side by side: did a change to the serving path pay?

`serving.py` searches each side's capacity, which takes minutes per side and, on a box other jobs load,
moves by a quarter from round to round. This compares two versions of edge at fixed points instead: one
request at a time (closed loop, median), and open-loop Poisson arrivals at each `--rates` rate (p50, p99 and
the server's CPU time per request, every process of its session, from /proc). Each side serves the face
detector (or MobileNetV2) as `serving.py` serves it, from its own checkout's code (PYTHONPATH), in the
project's venv; sides alternate, in reversed order every other round, and restart every round; medians over
rounds. The load generator and its venv are `serving.py`'s.

    python bench/serving_ab.py --trees before=../main after=. [--model face] [--rounds 3] [--rates 100 450]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import serving_harness
from serving import RESULTS, Bench
from serving_harness import Server, bench_models, load_average


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", nargs="+", required=True, help="NAME=DIR: a checkout of the project, by name")
    parser.add_argument("--model", default="face", choices=["mobilenet_v2", "face"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rates", type=float, nargs="+", default=[100.0, 450.0], help="offered rates, requests/s")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per rate (after 1 s warm-up)")
    parser.add_argument("--one-count", type=int, default=300, help="requests one at a time")
    parser.add_argument("--json", type=Path, default=RESULTS / "serving_ab.json")
    args = parser.parse_args()
    trees = dict(tree.split("=", 1) for tree in args.trees)
    bench = Bench(argparse.Namespace(seconds=args.seconds, delay_ms=2.0, top=1.5), RESULTS / "serving-logs")
    (model,) = bench_models([args.model])
    model.write_requests()
    request = model.request_for("edge")
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    started = time.monotonic()
    try:
        for round_ in range(args.rounds):
            for name in list(trees) if round_ % 2 == 0 else list(reversed(trees)):
                print(f"round {round_ + 1} {name} (load average {load_average():.2f})", flush=True)
                serving_harness.REPO = Path(trees[name]).resolve()  # the server's PYTHONPATH
                server = Server("edge", model, 2.0, RESULTS / "serving-logs" / f"ab-{name}.log")
                try:
                    bench.http(server.url, request, max(args.rates), 2.0)  # warm-up
                    one = bench.load.run(op="one_at_a_time", url=server.url, body=request[0], headers=request[1],
                                         count=args.one_count, warmup=30)  # fmt: skip
                    probes = {str(rate): bench.http(server.url, request, rate, server=server) for rate in args.rates}
                    rounds[name].append({"one_at_a_time_ms": one["median"], "probes": probes})
                finally:
                    server.stop()
    finally:
        bench.load.close()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rounds": rounds}, indent=1))
    print(f"\n{args.model}, medians of {args.rounds} rounds (rounds in brackets)\n")
    print(
        "| side | one at a time ms | " + " | ".join(f"{r:g}/s: p50 / p99 ms, server CPU ms" for r in args.rates) + " |"
    )
    print("|---|---|" + "---|" * len(args.rates))
    for name, records in rounds.items():
        cells = [_median_of([r["one_at_a_time_ms"] for r in records])]
        for rate in args.rates:
            probes = [r["probes"][str(rate)] for r in records]
            p50, p99 = (
                statistics.median(p[q] if p[q] is not None else float("inf") for p in probes) for q in ("p50", "p99")
            )
            cells.append(f"{p50:.1f} / {p99:.1f}, {_median_of([p['server_cpu_ms_per_request'] for p in probes])}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\n{time.monotonic() - started:.0f} s; load average {load_average():.2f}; results in {args.json}")


def _median_of(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({' '.join(f'{v:.2f}' for v in values)})"


if __name__ == "__main__":
    main()
