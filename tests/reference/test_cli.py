"""The command line reference: every command and option of both programs, with its default."""

from __future__ import annotations

import argparse

import pytest

from converters.cli import build_parser as build_convert_parser
from edge_runtime.cli import build_parser
from edge_runtime.commands.help_text import commands_of
from edge_runtime.reference.cli import GLOBAL_DEST, cli_page


@pytest.fixture(scope="module")
def page() -> str:
    return cli_page()


def test_every_command_has_a_section(page: str) -> None:
    for parser in (build_parser(), build_convert_parser()):
        for names, _ in commands_of(parser):
            assert f"## `{' '.join(names)}`\n" in page
    assert "## `edge-runtime fleet rollout`" in page and "## `edge-runtime config example`" in page


def test_every_option_of_every_command_is_listed(page: str) -> None:
    for parser in (build_parser(), build_convert_parser()):
        for names, command in commands_of(parser):
            section = page.split(f"## `{' '.join(names)}`\n", 1)[1].split("\n## ", 1)[0]
            for action in command._actions:
                if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                    continue
                if action.dest == GLOBAL_DEST and len(names) > 1:
                    continue  # listed once, with the program's own options
                first = f"`{action.option_strings[0]}`" if action.option_strings else f"`{action.dest}`"
                assert first in section, (names, action.dest)


def test_options_are_listed_with_value_default_and_help(page: str) -> None:
    assert "| `--drain-timeout` | `SECONDS` | `300.0` | with --exit-when-done," in page
    assert "| `--config` | `FILE` | `/etc/edge-runtime/config.yaml` | the config file |" in page
    assert "| `--key` | `FILE` | **required** |" in page
    assert "| `--expires-in` | `DURATION` | `90d` | signature lifetime, e.g. 90d, 12h, 2w |" in page
    assert "| `-o`, `--output` | `DIR` | **required** | package folder to write |" in page


def test_examples_and_exit_statuses_are_on_the_page(page: str) -> None:
    run = page.split("## `edge-runtime run`\n", 1)[1].split("\n## ", 1)[0]
    assert "examples:\n  edge-runtime run --config /etc/edge-runtime/config.yaml" in run
    assert "\n  3   with --exit-when-done" in run
