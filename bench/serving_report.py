"""What `serving.py` decides a probe by, and the Markdown report it prints from its results.

CPU time per request: the server's (every process of its session, from /proc, around each probe: the
warm-up's requests are counted with the probe's, since the server worked on them inside that window) and
the load generator's (its own process time), each divided by the requests answered 200. For a model whose
inference takes under 1 ms, the server's CPU time per request outside inference is also shown: the
server's CPU time per request less the CPU time one inference costs in-process (`model_alone`), under
the hint the side compiles with.
"""

from __future__ import annotations

import statistics
from typing import Any

BOUND_MS = 50.0
LATENCY_HINT_SIDES = ("naive", "edge-latency")  # compiled under the latency hint; the others under throughput
SMALL_MODEL_MS = 1.0  # below this synchronous latency (under either hint), the CPU outside inference is shown


def passes(result: dict[str, Any]) -> bool:
    p99 = result.get("p99")
    return (
        p99 is not None
        and p99 <= BOUND_MS
        and result["ok"] >= 0.99 * result["sent"]
        and result["achieved"] >= 0.95 * result.get("sent_rate", result["offered"])
        and not result.get("aborted")
    )


def at_capacity(probes: list[dict[str, Any]], rate: float) -> dict[str, Any] | None:
    """The passing probe at `rate` (the capacity a round found), for its p50/p99 and CPU time."""
    return next((p for p in reversed(probes) if passes(p) and abs(p["offered"] - rate) < 1e-6), None)


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}" if theirs > 0 else "no capacity to compare"


def median_of(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def cpu_per_request(probe: dict[str, Any] | None, key: str) -> float | None:
    """ms of CPU per answered request: `server_cpu_s` or `client_cpu_s`."""
    if probe is None or not probe.get("ok_all") or probe.get(key) is None:
        return None
    return float(probe[key]) / probe["ok_all"] * 1000


def is_small(alone: dict[str, Any]) -> bool:
    return min(alone["sync_served_ms"], alone["sync_latency_hint_ms"]) < SMALL_MODEL_MS


def inference_cpu_ms(alone: dict[str, Any], side: str) -> float:
    return float(alone["sync_latency_hint_cpu_ms"] if side in LATENCY_HINT_SIDES else alone["async_cpu_ms"])


def shown_ms(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def capacity_rows(result: dict[str, Any], sides: list[str], cpu_rate: float) -> list[str]:
    alone, records = result["alone"], result["sides"]
    small = is_small(alone)
    lines = []
    for side in sides:
        record = records[side]
        rounds = " ".join(f"{c:.0f}" for c in record["capacity"])
        last = at_capacity(record["probes"], record["capacity"][-1])
        latency = f"{last['p50']:.1f} / {last['p99']:.1f}" if last else "-"
        fixed = [cpu_per_request(p, "server_cpu_s") for p in record["at_cpu_rate"]]
        at_rate = median_of(fixed)
        at_cap = median_of(
            [cpu_per_request(at_capacity(record["probes"], c), "server_cpu_s") for c in record["capacity"]]
        )
        client = median_of([cpu_per_request(p, "client_cpu_s") for p in record["at_cpu_rate"]])
        outside = "" if not small or at_rate is None else f" | {at_rate - inference_cpu_ms(alone, side):.2f}"
        versus = ratio(records["edge"]["median_capacity"], record["median_capacity"]) if "edge" in records else "-"
        capacity = f"**{record['median_capacity']:.0f}** ({rounds})"
        cpu = f"{shown_ms(at_rate)}{outside} | {shown_ms(at_cap)} | {shown_ms(client)}"
        lines.append(f"| {result['model']} | {side} | {capacity} | {latency} | {cpu} | {versus} |")
    return lines


def bound_lines(result: dict[str, Any]) -> list[str]:
    """The model alone under the same open loop and bound, and each side's capacity as a share of it."""
    bound = result.get("in_process") or {}
    if not bound.get("capacity"):
        return []
    rounds = " ".join(f"{c:.0f}" for c in bound["capacity"])
    shares = ", ".join(
        f"{side} {ratio(record['median_capacity'], bound['median_capacity'])}"
        for side, record in result["sides"].items()
    )
    return [
        f"The model alone, the same arrivals on OpenVINO's async queue in one process (no server): "
        f"**{bound['median_capacity']:.0f}**/s ({rounds}) at the same bound, against "
        f"{result['alone']['async_fps']:.0f} inferences/s kept busy in a closed loop. Share of it: {shares}.",
        "",
    ]


def report(everything: list[dict[str, Any]], sides: list[str], cpu_rate: float) -> str:
    results = [result for result in everything if result["sides"]]
    lines = ["### Capacity at p99 ≤ 50 ms, and CPU time per request", ""]
    lines += [f"Capacity: requests/s, median of rounds (rounds in brackets); p50 / p99 (ms) at the last round's "
              f"capacity. CPU: ms per answered request, medians of rounds; the server's (all its processes) at "
              f"{cpu_rate:.0f} requests/s and at capacity, the load generator's at {cpu_rate:.0f}/s. Outside "
              f"inference (models under {SMALL_MODEL_MS:g} ms only): the server's CPU at {cpu_rate:.0f}/s less "
              f"one inference's CPU in-process.", ""]  # fmt: skip
    for result in results:
        alone = result["alone"]
        small = is_small(alone)
        head = f"server CPU at {cpu_rate:.0f}/s" + (" | outside inference" if small else "")
        lines += [f"{result['model']}: one inference in-process costs {alone['async_cpu_ms']:.2f} ms of CPU in "
                  f"OpenVINO's async queue (throughput hint), {alone['sync_latency_hint_cpu_ms']:.2f} ms "
                  f"synchronously under the latency hint", ""]  # fmt: skip
        lines += [f"| model | side | capacity /s | p50 / p99 ms | {head} | server CPU at capacity | "
                  "generator CPU | edge / side |"]  # fmt: skip
        lines += ["|---" * (8 + small) + "|", *capacity_rows(result, sides, cpu_rate), ""]
        lines += bound_lines(result)
    lines += ["### p50 / p99 latency (ms) against offered load (round 1; achieved rate where under 95%)", ""]
    for result in results:
        lines += [f"{result['model']}, the model alone: {result['alone']['async_fps']:.0f} inferences/s", ""]
        lines += ["| offered /s | " + " | ".join(sides) + " |", "|---" * (len(sides) + 1) + "|"]
        curves = [result["sides"][x]["curve"] for x in sides]
        for points in zip(*curves, strict=True):
            cells = []
            for point in points:
                shown = f"{point['p50']:.1f} / {point['p99']:.1f}" if point["p99"] is not None else "no answers"
                if point["achieved"] < 0.95 * point["offered"]:
                    shown += f" (achieved {point['achieved']:.0f})"
                cells.append(shown)
            lines.append(f"| {points[0]['offered']:.0f} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["### One request at a time: median latency (ms)", ""]
    lines += ["| model | synchronous, as served | synchronous, latency hint | " + " | ".join(sides) + " |"]
    lines += ["|---" * (len(sides) + 3) + "|"]
    for result in results:
        alone = result["alone"]
        cells = [f"{result['sides'][x]['one_at_a_time_ms']['median']:.2f}" for x in sides]
        first = f"| {result['model']} | {alone['sync_served_ms']:.2f} | {alone['sync_latency_hint_ms']:.2f} | "
        lines.append(first + " | ".join(cells) + " |")
    return "\n".join(lines + mqtt_report(everything))


def mqtt_report(everything: list[dict[str, Any]]) -> list[str]:
    if not any(result.get("mqtt") for result in everything):
        return []
    lines = ["", "### MQTT 5 request/response beside HTTP, edge_runtime, the same JPEG body (capacity at p99 ≤ 50 ms)"]
    lines += ["", "| model | server | HTTP /s | p50 / p99 ms | MQTT /s | p50 / p99 ms |", "|---|---|---|---|---|---|"]
    for result in everything:
        sides_done = sorted({route.split()[0] for route in result.get("mqtt", {})})
        for side in sides_done:
            cells = []
            for route in ("http", "mqtt"):
                record = result["mqtt"][f"{side} {route}"]
                probe = at_capacity(record["probes"], record["capacity"][-1])
                latency = f"{probe['p50']:.1f} / {probe['p99']:.1f}" if probe else "-"
                rounds = " ".join(f"{c:.0f}" for c in record["capacity"])
                cells += [f"{record['median_capacity']:.0f} ({rounds})", latency]
            lines.append(f"| {result['model']} | {side} | " + " | ".join(cells) + " |")
    return lines
