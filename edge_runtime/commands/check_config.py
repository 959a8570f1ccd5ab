"""`edge-runtime check-config FILE`: validate a daemon config without starting anything.

Meant for the moment after an edit and before `systemctl reload` (or as the unit's ExecStartPre=):
it reads the file as `run` would, with the same environment and credentials, checks the models it
names, and lists every problem with its line and field. Secrets are masked in what it prints.
"""

from __future__ import annotations

import argparse
import sys

from edge_runtime.config import ConfigFileError, DaemonConfig, load_config


def run_check_config(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file)
    except ConfigFileError as error:
        for problem in error.problems:
            print(problem, file=sys.stderr)
        count = len(error.problems)
        print(f"{args.file}: {count} problem{'s' if count != 1 else ''}", file=sys.stderr)
        return 2
    print(f"{args.file}: ok ({summary(config)})")
    return 0


def summary(config: DaemonConfig) -> str:
    """'2 pipelines: entrance-faces, pump-vibration (disabled)'."""
    count = len(config.pipelines)
    names = ", ".join(p.name if p.enabled else f"{p.name} (disabled)" for p in config.pipelines)
    return f"{count} pipeline{'s' if count != 1 else ''}: {names}"
