"""The `edge-runtime` command line.

Each sub-command lives in its own module under `edge_runtime/commands/`; this module only parses
arguments and turns the runtime's errors into one clear line and exit status 2, never a traceback.
`-v` and `-q` are taken before the command and after it, since both are how people type them.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from edge_runtime import __version__
from edge_runtime.backends import BACKENDS
from edge_runtime.commands.help_text import HelpFormatter, add_command, epilog, output_options
from edge_runtime.commands.log_output import configure_logging
from edge_runtime.commands.release_parsers import add_fleet_commands, add_signing_commands
from edge_runtime.errors import EdgeRuntimeError

PRECISIONS = ("fp32", "fp16", "bf16", "int8")
DEFAULT_CONFIG = Path("/etc/edge-runtime/config.yaml")
BAD_INPUT = "bad input: the command line, or a file or model it names (one line on stderr says which)"

if TYPE_CHECKING:
    from edge_runtime.commands.help_text import Commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edge-runtime",
        description="Edge inference runtime: runs models on the best accelerator of this box and publishes "
        "the results over MQTT.",
        epilog=epilog(
            ["edge-runtime run --config /etc/edge-runtime/config.yaml", "edge-runtime COMMAND --help"],
            {0: "done", 1: "the command ran but failed (see its help)", 2: BAD_INPUT, 130: "interrupted"},
        ),
        formatter_class=HelpFormatter,
        parents=[output_options(default=None)],
    )
    parser.add_argument("--version", action="version", version=f"edge-runtime {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run_command(commands)
    _add_health_command(commands)
    _add_config_commands(commands)
    _add_box_commands(commands)
    add_signing_commands(commands, BAD_INPUT)
    add_fleet_commands(commands, BAD_INPUT)
    return parser


def _add_run_command(commands: Commands) -> None:
    run = add_command(
        commands,
        "run",
        "run the daemon: pipelines from camera and sensor sources to MQTT, and models served on request",
        [
            "edge-runtime run --config /etc/edge-runtime/config.yaml",
            "edge-runtime run --config job.yaml --exit-when-done --drain-timeout 600",
        ],
        {
            0: "stopped by SIGTERM or SIGINT; with --exit-when-done: every result reached the broker",
            2: "the config file has problems (each is listed), a model cannot be loaded, or a QoS 2 pipeline "
            "meets a broker that takes at most QoS 1",
            3: "with --exit-when-done: the broker did not take every result within --drain-timeout; they stay "
            "in the spool for the next start",
        },
    )
    run.add_argument("--config", type=Path, default=DEFAULT_CONFIG, metavar="FILE", help="the config file")
    _add_box_options(run, state_dir=False)
    run.add_argument(
        "--exit-when-done",
        action="store_true",
        help="stop once every source has ended (files played once) and the results reached the broker; "
        "exit status 3 if some are still in the spool after --drain-timeout",
    )
    run.add_argument(
        "--drain-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="with --exit-when-done, how long to wait for the spool to reach the broker",
    )


def _add_health_command(commands: Commands) -> None:
    health = add_command(
        commands,
        "health",
        "say whether the running daemon does its work: every pipeline advances, and results reach the broker "
        "or wait in the spool while it is down (a container's health check)",
        ["edge-runtime health", "edge-runtime health --state-dir /var/lib/edge-runtime --json"],
        {0: "healthy", 1: "unhealthy: a pipeline or the delivery stalled, or no daemon reported (why, on stderr)"},
    )
    health.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="the daemon's state_dir (default: $STATE_DIRECTORY; else /var/lib/edge-runtime for root, "
        "~/.local/state/edge-runtime for anyone else)",
    )
    health.add_argument("--json", action="store_true", help="print the verdict and the daemon's report as JSON")


def _add_config_commands(commands: Commands) -> None:
    check = add_command(
        commands,
        "check-config",
        "validate a daemon config file, and the models it names, without running it",
        ["edge-runtime check-config /etc/edge-runtime/config.yaml"],
        {0: "the file is valid", 2: "it has problems: each is listed on stderr with its line and key"},
    )
    check.add_argument("file", type=Path, help="the YAML config file")

    config = add_command(
        commands,
        "config",
        "print config files to start from",
        ["edge-runtime config example > config.yaml"],
        {0: "written", 2: BAD_INPUT},
    )
    actions = config.add_subparsers(dest="config_command", required=True, metavar="CONFIG_COMMAND")
    add_command(
        actions,
        "example",
        "print a config file with every key at its default, each described in a comment",
        ["edge-runtime config example > config.yaml", "edge-runtime check-config config.yaml"],
        {0: "printed"},
    )


def _add_box_commands(commands: Commands) -> None:
    probe = add_command(
        commands,
        "probe",
        "show the hardware, backends and device profile of this box, and how it would run a model",
        ["edge-runtime probe", "edge-runtime probe --json --model packages/face_detection"],
        {0: "shown", 2: BAD_INPUT},
    )
    probe.add_argument("--model", type=Path, metavar="PATH", help="also rank the backend choices for this model")
    probe.add_argument("--json", action="store_true", help="print JSON for programs")
    _add_box_options(probe)

    bench = add_command(
        commands,
        "bench",
        "measure latency, throughput and fidelity of a model on each way this box can run it",
        [
            "edge-runtime bench packages/face_detection --compare",
            "edge-runtime bench packages/face_detection --select --state-dir /var/lib/edge-runtime",
        ],
        {
            0: "measured: at least one choice ran (and, with --compare or --select, stayed within the tolerance)",
            1: "no choice could be measured, or none stayed within the tolerance",
            2: BAD_INPUT + "; or nothing can run the model on this box",
        },
    )
    bench.add_argument("model", type=Path, help="model package directory or model file")
    bench.add_argument("--backend", choices=list(BACKENDS), help="only this backend")
    bench.add_argument("--device", help="only this device, e.g. CPU, GPU, NPU, CUDA")
    bench.add_argument("--precision", choices=PRECISIONS, help="run at this precision")
    bench.add_argument("--variant", help="only this variant of the package, e.g. openvino/int8")
    bench.add_argument(
        "--seconds", type=float, default=5.0, metavar="SECONDS", help="time per choice for latency, and for throughput"
    )
    bench.add_argument(
        "--rounds",
        type=int,
        default=3,
        metavar="N",
        help="split each choice's time into N rounds, alternating between the choices; figures are medians over them",
    )
    bench.add_argument(
        "--hint",
        choices=("latency", "throughput"),
        default="latency",
        help="the backend's performance hint, and what --select takes the fastest by",
    )
    bench.add_argument("--threads", type=int, metavar="N", help="inference threads (default: all cores)")
    bench.add_argument("--compare", action="store_true", help="check outputs against the fp32 CPU reference")
    bench.add_argument(
        "--tolerance", type=float, metavar="FRACTION", help="largest error allowed, as a fraction of the output range"
    )
    bench.add_argument("--select", action="store_true", help="measure every runnable choice, store the fastest")
    bench.add_argument("--json", action="store_true", help="print JSON for programs")
    _add_box_options(bench)


def _add_box_options(parser: argparse.ArgumentParser, state_dir: bool = True) -> None:
    parser.add_argument(
        "--root", type=Path, default=Path("/"), metavar="DIR", help="read hardware facts below this directory"
    )
    parser.add_argument(
        "--profiles",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="extra device profile directory (repeatable)",
    )
    if state_dir:
        parser.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            metavar="DIR",
            help="where the service keeps choices stored by `bench --select` and int8 checks "
            "(default: $STATE_DIRECTORY as the service has it; else /var/lib/edge-runtime for root, "
            "~/.local/state/edge-runtime for anyone else)",
        )


def log_level(given: int | None, command: str) -> int:
    """-v, -vv or -q when given; else `run`, a service, says what it does (INFO), and the other commands
    speak only when something is wrong."""
    if given is not None:
        return given
    return logging.INFO if command == "run" else logging.WARNING


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(log_level(args.log_level, args.command))
    try:
        return _run(args)
    except EdgeRuntimeError as error:
        print(f"edge-runtime: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace) -> int:
    if args.command == "run":
        from edge_runtime.service.daemon import run_daemon

        return run_daemon(args)
    if args.command == "health":
        from edge_runtime.commands.health import run_health

        return run_health(args)
    if args.command == "check-config":
        from edge_runtime.commands.check_config import run_check_config

        return run_check_config(args)
    if args.command == "config":
        from edge_runtime.reference.example import config_example

        print(config_example(), end="")
        return 0
    if args.command == "probe":
        from edge_runtime.commands.probe import run_probe

        return run_probe(args)
    if args.command == "keys":
        from edge_runtime.commands.keys import run_keys

        return run_keys(args)
    if args.command == "package":
        from edge_runtime.commands.package import run_package

        return run_package(args)
    if args.command == "fleet":
        from edge_runtime.commands.fleet import run_fleet

        return run_fleet(args)
    from edge_runtime.commands.bench import run_bench

    return run_bench(args)
