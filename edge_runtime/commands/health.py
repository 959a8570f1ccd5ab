"""`edge-runtime health`: exit 0 only while a running daemon's pipelines and deliveries advance.

A container's HEALTHCHECK runs it every half minute, so it reads the report the daemon keeps in its state
directory (edge_runtime.service.health) instead of loading the config or asking over the network.
"""

from __future__ import annotations

import argparse
import json
import sys

from edge_runtime.config.directories import default_state_dir
from edge_runtime.service.health import HEALTH_FILE, judge_report

__all__ = ["run_health"]

EXIT_UNHEALTHY = 1


def run_health(args: argparse.Namespace) -> int:
    verdict = judge_report((args.state_dir or default_state_dir()) / HEALTH_FILE)
    if args.json:
        print(json.dumps({"healthy": verdict.healthy, "summary": verdict.summary, "report": verdict.report}))
    else:
        print(verdict.summary, file=sys.stdout if verdict.healthy else sys.stderr)
    return 0 if verdict.healthy else EXIT_UNHEALTHY
