"""How `--help` reads for every command of `edge-runtime` and `edge-convert`.

Each command's help ends with examples to copy and the exit statuses a script can test; each option's
help ends with its default, taken from the parser itself so that it cannot drift from what the option
does. A default that says nothing (none, off, empty) is left out: the option's help says what happens
without it. Every command takes -v and -q, after its name as well as before it.
"""

from __future__ import annotations

import argparse
import logging
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["HelpFormatter", "add_command", "commands_of", "epilog", "output_options", "shows_default"]

WIDTH = 100  # the epilog is printed as written, so it is wrapped here


def shows_default(action: argparse.Action) -> bool:
    """Whether an option's default is worth printing: not for flags, nor for none or an empty list."""
    default = action.default
    if action.nargs == 0 or default is None or default == argparse.SUPPRESS or isinstance(default, bool):
        return False
    return not (isinstance(default, (list, tuple)) and not default)


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions and epilogs as written (their examples keep their lines), defaults after each option."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if not shows_default(action):
            return action.help
        return super()._get_help_string(action)


def epilog(examples: Sequence[str], exit_statuses: Mapping[int, str]) -> str:
    """The end of a command's help: a few commands to copy, then what each exit status means."""
    lines = ["examples:", *(f"  {example}" for example in examples), "", "exit status:"]
    for status, meaning in exit_statuses.items():
        lines += textwrap.wrap(meaning, WIDTH, initial_indent=f"  {status:<4}", subsequent_indent=" " * 6)
    return "\n".join(lines)


class _MoreVerbose(argparse.Action):
    """-v: INFO; a second -v, before or after the command: DEBUG."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        now = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, logging.DEBUG if now in (logging.INFO, logging.DEBUG) else logging.INFO)


def output_options(default: object) -> argparse.ArgumentParser:
    """-v and -q, for the main parser (default None) and for every command (default SUPPRESS).

    A command's parser writes its defaults over what the main parser read, so there the options must
    have no default at all: `edge-runtime -v probe` would otherwise lose its -v."""
    options = argparse.ArgumentParser(add_help=False)
    group = options.add_mutually_exclusive_group()
    group.add_argument(
        "-v",
        "--verbose",
        dest="log_level",
        action=_MoreVerbose,
        default=default,
        help="log what the runtime decides and why; -vv: debug, with OpenCV's and FFmpeg's own messages "
        "(for run: instead of the config's log_level)",
    )
    group.add_argument(
        "-q",
        "--quiet",
        dest="log_level",
        action="store_const",
        const=logging.WARNING,
        default=default,
        help="log warnings and errors only (for run: instead of the config's log_level)",
    )
    return options


def add_command(
    commands: Commands, name: str, summary: str, examples: Sequence[str], exit_statuses: Mapping[int, str]
) -> argparse.ArgumentParser:
    """A command whose help gives its one-line summary, examples and exit statuses, and takes -v and -q."""
    return commands.add_parser(
        name,
        help=summary,
        description=summary[:1].upper() + summary[1:] + ".",
        epilog=epilog(examples, exit_statuses),
        formatter_class=HelpFormatter,
        parents=[output_options(default=argparse.SUPPRESS)],
    )


def commands_of(
    parser: argparse.ArgumentParser, names: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """The parser and each command below it, depth first, with the words that name it."""
    names = names or (parser.prog,)
    yield names, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield from commands_of(command, (*names, name))
