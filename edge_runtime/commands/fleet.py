"""`edge-runtime fleet`: the operator's view of a fleet and its rollouts, from any machine on the broker.

    fleet [--host H] [--port P] --key KEY [--devices PATTERN] status   each box: releases, pipelines, health
    fleet ... rollout ARCHIVE --url URL [--canary N] [--max-failures PCT] [--timeout S] [--skip-offline]
    fleet ... rollback PACKAGE [--canary N] [--max-failures PCT] [--timeout S] [--skip-offline]

Commands are signed with the operator's key (`--key`); a box takes them only if its `control.keys`
holds the public half. Progress prints as each box moves on; the summary ends the run, and the exit
status is 0 only if every box committed. A matching box whose retained status says it is offline
would miss the release unnoticed, so `rollout` and `rollback` list such boxes and send nothing,
exiting 1, unless `--skip-offline` says to go on without them; `status` lists them after the boxes
that answered, and exits 1 while any is offline.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from edge_runtime.control.fleet import BoxProgress, FleetClient, RolloutPlan, new_rollout_id, roll_out, waves_of
from edge_runtime.package.archive import unpack
from edge_runtime.package.loader import sha256_of
from edge_runtime.package.manifest import MANIFEST_NAME, read_manifest

__all__ = ["run_fleet"]


def run_fleet(args: argparse.Namespace) -> int:
    client = FleetClient(
        args.host, args.port, args.prefix, Path(args.key), username=args.username,
        password=os.environ.get("MQTT_PASSWORD"),
    )  # fmt: skip
    try:
        boxes = client.boxes(args.devices)
        offline = client.offline(args.devices)
        if args.fleet_command == "status":
            if not boxes and not offline:
                print(f"no box matching {args.devices!r} is known under {args.prefix}/", file=sys.stderr)
                return 1
            return _status(client, boxes, offline)
        if offline and not args.skip_offline:
            print(
                f"{len(offline)} box(es) matching {args.devices!r} are offline: {', '.join(offline)}; nothing "
                "was sent (start them, or pass --skip-offline to go on without them)",
                file=sys.stderr,
            )
            return 1
        if not boxes:
            print(f"no box matching {args.devices!r} is online under {args.prefix}/", file=sys.stderr)
            return 1
        plan = _plan(args)
        rollout_id = new_rollout_id()
        waves = " then ".join(", ".join(wave) for wave in waves_of(boxes, plan))
        print(f"rollout {rollout_id}: {plan.command} {plan.args.get('package')} on {waves}", flush=True)
        if offline:
            print(f"skipping offline boxes: {', '.join(offline)}", flush=True)
        progress = roll_out(client, boxes, plan, rollout_id, _Printer())
        print(_table(progress))
        return 0 if all(p.stage == "committed" for p in progress) else 1
    finally:
        client.close()


def _plan(args: argparse.Namespace) -> RolloutPlan:
    common = {"canary": args.canary, "wave_size": args.wave_size, "max_failures": args.max_failures,
              "timeout_s": args.timeout}  # fmt: skip
    if args.fleet_command == "rollback":
        return RolloutPlan("rollback", {"package": args.package}, **common)
    archive = Path(args.archive)
    with TemporaryDirectory() as scratch:
        package = read_manifest(unpack(archive, Path(scratch)) / MANIFEST_NAME).name
    arguments = {"package": package, "url": args.url, "sha256": sha256_of(archive)}
    return RolloutPlan("rollout start", arguments, **common)


def _status(client: FleetClient, boxes: list[str], offline: list[str]) -> int:
    """One row per box: those online with what they answer, then those whose retained status says offline
    (a box that died leaves that as its last will). 0 only if every box is online and answered."""
    rows = [("box", "broker", "models", "pipelines", "last rollout")]
    failed = len(offline)
    for device in boxes:
        try:
            answer = client.command(device, "status", timeout=10)
            result = answer["result"]
            report = result["report"]
            models = client.command(device, "models list", timeout=10)["result"]["loaded"]
            loaded = ", ".join(_model(m) for m in models) or "-"
            pipelines = ", ".join(f"{n} {p['fps_out']:.1f} fps" for n, p in report["pipelines"].items()) or "-"
            rollout = report.get("rollout")
            last = f"{rollout['rollout_id']} {rollout['stage']}" if rollout and "rollout_id" in rollout else "-"
            mqtt = report["mqtt"]
            moves = mqtt["broker_moves"]
            broker = f"{mqtt['broker']} ({moves} move{'' if moves == 1 else 's'})"
            rows.append((device, broker, loaded, pipelines, last))
        except Exception as error:  # a box that answers badly, or not at all, is shown, not fatal
            failed += 1
            rows.append((device, "-", "-", "-", f"no status: {error}"))
    rows += [(device, "-", "-", "-", "offline") for device in offline]
    print(_columns(rows))
    return 1 if failed else 0


def _model(loaded: dict[str, Any]) -> str:
    """A loaded model as `package version (release N)`; the release is the signed one (None: unsigned)."""
    release = loaded.get("release")
    return f"{loaded['package']} {loaded['version']}" + (f" (release {release})" if release is not None else "")


class _Printer:
    """Prints one line per box whose stage changed since the last call."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def __call__(self, progress: list[BoxProgress]) -> None:
        for box in progress:
            if self._seen.get(box.device_id) != box.stage:
                self._seen[box.device_id] = box.stage
                detail = f" ({box.reason})" if box.reason and box.stage in ("failed", "rolled_back") else ""
                print(f"{time.strftime('%H:%M:%S')} wave {box.wave} {box.device_id}: {box.stage}{detail}", flush=True)


def _table(progress: list[BoxProgress]) -> str:
    rows = [("box", "wave", "outcome", "release", "reason")]
    rows += [(p.device_id, str(p.wave), p.stage, str(p.release or "-"), p.reason or "-") for p in progress]
    return _columns(rows)


def _columns(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows)
