"""`docs/reference/cli.md`: every command and option of `edge-runtime` and `edge-convert`.

Read from the argparse parsers the commands themselves build, walking their actions (not their help
output, whose wrapping depends on the terminal): each option's names, value, default and help, and each
command's description and epilog (its examples and exit statuses) as written.
"""

from __future__ import annotations

import argparse

from edge_runtime.commands.help_text import commands_of, shows_default
from edge_runtime.reference.fields import slug
from edge_runtime.reference.markdown import cell, code, generated_notice, table

__all__ = ["cli_page"]

INTRO = """\
`edge-runtime` runs on the box: the daemon and the commands that look at the box, sign packages and
command a fleet. `edge-convert` runs on a workstation and turns a trained model into a package. Every
command takes `-h` (`--help`), which prints what is below for that command; `-v` and `-q` go before
an `edge-runtime` command or after it. `python -m edge_runtime` is `edge-runtime`."""

# Taken by every command of edge-runtime, before or after its name: listed once, with the program's options.
GLOBAL_DEST = "log_level"


def cli_page() -> str:
    from converters.cli import build_parser as build_convert_parser
    from edge_runtime.cli import build_parser

    lines = [generated_notice(), "", "# Command line reference", "", INTRO]
    for parser in (build_parser(), build_convert_parser()):
        for names, command in commands_of(parser):
            lines += _command_section(names, command)
    return "\n".join(lines) + "\n"


def _command_section(names: tuple[str, ...], parser: argparse.ArgumentParser) -> list[str]:
    title = " ".join(names)
    lines = ["", f'<a id="{slug(title)}"></a>', "", f"## `{title}`", ""]
    if parser.description:
        lines += [cell(parser.description), ""]
    lines += ["```text", _synopsis(names, parser), "```"]
    top_level = len(names) == 1
    arguments = [a for a in _arguments(parser) if top_level or a.dest != GLOBAL_DEST]
    if arguments:
        lines += ["", *table(("argument", "value", "default", "description"), [_row(a, title) for a in arguments])]
    subcommands = _subcommands(parser)
    if subcommands:
        rows = [(f"[`{name}`](#{slug(f'{title} {name}')})", cell(help_text)) for name, help_text in subcommands]
        lines += ["", *table(("command", "what it does"), rows)]
    if parser.epilog:
        lines += ["", "```text", parser.epilog, "```"]
    return lines


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        action
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
    ]


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._get_subactions()}
            found += [(name, helps.get(name, "")) for name in action.choices]
    return found


def _synopsis(names: tuple[str, ...], parser: argparse.ArgumentParser) -> str:
    """`edge-runtime fleet rollout [options] ARCHIVE --url URL`: what must be given, and that more may be."""
    words = list(names)
    arguments = [a for a in _arguments(parser) if a.dest != GLOBAL_DEST]
    if any(a.option_strings and not a.required for a in arguments):
        words.append("[options]")
    for action in arguments:
        if not action.option_strings:
            words.append(_value(action))
        elif action.required:
            words.append(f"{_longest(action)} {_value(action)}".strip())
    if _subcommands(parser):
        words.append("COMMAND ...")
    return " ".join(words)


def _row(action: argparse.Action, prog: str) -> tuple[str, str, str, str]:
    names = ", ".join(code(name) for name in action.option_strings) or code(_value(action))
    if action.required and action.option_strings:
        default = "**required**"
    elif shows_default(action):
        default = code(str(action.default))
    else:
        default = ""
    value = "" if not action.option_strings or action.nargs == 0 else code(_value(action))
    return names, value, default, cell(_help(action, prog))


def _value(action: argparse.Action) -> str:
    """What follows the option, as argparse's usage writes it: its metavar, its choices, or its name."""
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        word = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    elif action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        word = "{" + ",".join(str(choice) for choice in action.choices) + "}"
    else:
        word = action.dest.upper() if action.option_strings else action.dest
    if action.nargs == "+":
        return f"{word} [{word} ...]"
    if action.nargs == "*":
        return f"[{word} ...]"
    if action.nargs == "?":
        return f"[{word}]"
    return word


def _longest(action: argparse.Action) -> str:
    return max(action.option_strings, key=len)


def _help(action: argparse.Action, prog: str) -> str:
    """The help as argparse prints it: `%(default)s` and the like filled in, `%%` made `%`."""
    text = action.help or ""
    if "%" not in text:
        return text
    params = {key: value for key, value in vars(action).items() if value is not argparse.SUPPRESS}
    return text % {**params, "prog": prog}
