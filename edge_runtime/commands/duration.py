"""Durations on the command line (`--expires-in 90d`), apart from the commands that use them, so that
building a parser does not import what only running a command needs (cryptography, for signing)."""

from __future__ import annotations

import argparse
import re
from datetime import timedelta

__all__ = ["parse_duration"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> timedelta:
    """`90d`, `12h`, `2w`, `30m`, `3600s`: how long a signature stays valid."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhdw])\s*", text)
    if match is None or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"expected a duration like 90d, 12h or 2w, got {text!r}")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
