"""Log lines as a person reads them: stamped in a terminal, bare under journald, no native chatter."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from broker import free_port

from edge_runtime.cli import build_parser, log_level

SCRIPT = """
import logging, sys
import cv2
from edge_runtime.commands.log_output import configure_logging
configure_logging(int(sys.argv[1]))
logging.getLogger("edge_runtime.test").warning("a line of ours")
cv2.VideoCapture(sys.argv[2], cv2.CAP_FFMPEG).release()
"""


def run_logging(tmp_path: Path, level: int, *, journal: bool = False) -> str:
    """Run the script with stderr into a file; with `journal`, JOURNAL_STREAM names that file, as systemd would."""
    stderr_path = tmp_path / "stderr"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCV_", "JOURNAL_STREAM"))}
    with stderr_path.open("wb") as stderr:
        if journal:
            status = os.fstat(stderr.fileno())
            env["JOURNAL_STREAM"] = f"{status.st_dev}:{status.st_ino}"
        url = f"rtsp://127.0.0.1:{free_port()}/nobody-listens"
        subprocess.run([sys.executable, "-c", SCRIPT, str(level), url], stderr=stderr, env=env, check=True, timeout=60)
    return stderr_path.read_text()


def test_a_terminal_gets_timestamps_and_none_of_opencvs_or_ffmpegs_own_lines(tmp_path: Path) -> None:
    lines = run_logging(tmp_path, logging.INFO).splitlines()
    assert len(lines) == 1, lines
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} WARNING edge_runtime\.test: a line of ours", lines[0])


def test_journald_stamps_lines_itself(tmp_path: Path) -> None:
    assert run_logging(tmp_path, logging.INFO, journal=True).splitlines() == [
        "WARNING edge_runtime.test: a line of ours"
    ]


def test_debugging_keeps_the_native_messages(tmp_path: Path) -> None:
    said = run_logging(tmp_path, logging.DEBUG)
    assert "a line of ours" in said and "Connection refused" in said  # FFmpeg's own, about the refused stream


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["run"], logging.INFO),
        (["-q", "run"], logging.WARNING),
        (["run", "-q"], logging.WARNING),
        (["probe"], logging.WARNING),
        (["probe", "-v"], logging.INFO),
        (["-vv", "run"], logging.DEBUG),
        (["run", "-vv"], logging.DEBUG),
    ],
)
def test_run_says_what_it_does_and_other_commands_speak_when_asked(argv: list[str], level: int) -> None:
    args = build_parser().parse_args(argv)
    assert log_level(args.log_level, args.command) == level
