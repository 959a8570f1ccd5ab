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
    _add_signing_commands(commands)
    _add_fleet_commands(commands)
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


def _add_signing_commands(commands: Commands) -> None:
    from edge_runtime.commands.duration import parse_duration

    keys = add_command(
        commands,
        "keys",
        "make the Ed25519 keys that sign model packages and operators' commands",
        ["edge-runtime keys new ops-2026 --dir /secure/keys"],
        {0: "written", 2: BAD_INPUT},
    )
    keys_commands = keys.add_subparsers(dest="keys_command", required=True, metavar="KEYS_COMMAND")
    new = add_command(
        keys_commands,
        "new",
        "write NAME.key (private, mode 0600) and NAME.pub",
        ["edge-runtime keys new ops-2026", "edge-runtime keys new ops-2026 --dir /secure/keys"],
        {0: "written", 2: "a bad name, or NAME.key or NAME.pub exists already (a key is never overwritten)"},
    )
    new.add_argument("name", help="the key's name, e.g. ops-2026")
    new.add_argument("--dir", type=Path, default=Path(), metavar="DIR", help="where to write the two files")

    package = add_command(
        commands,
        "package",
        "make, sign, verify or pack a model package",
        ["edge-runtime package make yolov8n.onnx -o packages/yolov8n",
         "edge-runtime package sign packages/face --key ops-2026.key --release 4"],
        {0: "done", 2: BAD_INPUT},
    )  # fmt: skip
    package_commands = package.add_subparsers(dest="package_command", required=True, metavar="PACKAGE_COMMAND")
    make = add_command(
        package_commands,
        "make",
        "package an exported model as it is: ONNX, OpenVINO IR or TFLite (an Ultralytics export describes itself)",
        ["edge-runtime package make yolov8n.onnx -o /opt/edge-runtime/models/yolov8n",
         "edge-runtime package make yolov8n_openvino_model/ -o packages/yolov8n --version 2",
         "edge-runtime package make plain.onnx -o packages/sorter --task classification --labels labels.txt "
         "--decoder classification"],
        {0: "written, and it loads on this box", 2: BAD_INPUT},
    )  # fmt: skip
    make.add_argument(
        "model", type=Path, help="the model file (.onnx, .xml with its .bin, .tflite) or an OpenVINO folder"
    )
    make.add_argument(
        "-o", "--output", type=Path, required=True, metavar="DIR", help="the package folder to write (new or empty)"
    )
    make.add_argument("--name", help="the package's name (default: the file's name)")
    make.add_argument("--version", default="1", help="the package's version")
    make.add_argument(
        "--task", help="classification, detection, keypoints, segmentation, ... (default: the metadata's)"
    )
    make.add_argument("--labels", help="labels file (one per line) or a comma-separated list (default: the metadata's)")
    make.add_argument("--decoder", help="output decoder, e.g. yolo, classification (default: the metadata's)")
    make.add_argument("--decoder-params", metavar="JSON", help="decoder parameters as a JSON object")
    sign = add_command(
        package_commands,
        "sign",
        "write signature.json into a package",
        ["edge-runtime package sign packages/face --key ops-2026.key --release 4 --expires-in 180d"],
        {0: "signed", 2: BAD_INPUT},
    )
    sign.add_argument("package", type=Path, help="model package directory")
    sign.add_argument("--key", type=Path, required=True, help="private key file (from `keys new`)")
    sign.add_argument("--release", type=int, required=True, metavar="N", help="release number; boxes refuse lower ones")
    sign.add_argument(
        "--expires-in",
        type=parse_duration,
        default="90d",
        metavar="DURATION",
        help="signature lifetime, e.g. 90d, 12h, 2w",
    )
    verify = add_command(
        package_commands,
        "verify",
        "check a package, or its archive, as a box would before loading it",
        ["edge-runtime package verify face-4.tar.gz --trust ops-2026.pub --installed-release 3"],
        {0: "a box trusting these keys would load it", 2: "it would be refused; the reason is on stderr"},
    )
    verify.add_argument("package", type=Path, help="model package directory or .tar/.tar.gz archive")
    verify.add_argument("--trust", type=Path, nargs="+", required=True, metavar="PUBKEY", help="trusted public keys")
    verify.add_argument(
        "--installed-release", type=int, metavar="N", help="refuse releases lower than this one, as a box would"
    )
    pack = add_command(
        package_commands,
        "pack",
        "write a package as one reproducible tar archive, as `fleet rollout` sends it",
        ["edge-runtime package pack packages/face -o face-4.tar.gz"],
        {0: "written", 2: BAD_INPUT},
    )
    pack.add_argument("package", type=Path, help="model package directory")
    pack.add_argument("-o", "--output", type=Path, required=True, help="archive to write (.tar, .tar.gz)")


def _add_fleet_commands(commands: Commands) -> None:
    fleet = add_command(
        commands,
        "fleet",
        "command the boxes of a fleet over the broker: status, rollout, rollback",
        ["edge-runtime fleet --host mq.lan --key ops-2026.key status"],
        {0: "every box did as told", 1: "a box failed, did not answer or is offline", 2: BAD_INPUT},
    )
    fleet.add_argument("--host", default="localhost", help="the broker")
    fleet.add_argument("--port", type=int, default=1883, metavar="PORT", help="the broker's port")
    fleet.add_argument("--prefix", default="edge", help="the boxes' topic prefix (mqtt.topic_prefix)")
    fleet.add_argument("--key", required=True, metavar="FILE", help="the operator's private key (from `keys new`)")
    fleet.add_argument("--username", help="broker user name; the password is read from $MQTT_PASSWORD")
    fleet.add_argument("--devices", default="*", metavar="PATTERN", help="device ids to act on, a shell pattern")
    actions = fleet.add_subparsers(dest="fleet_command", required=True, metavar="FLEET_COMMAND")
    failed = "a box failed or did not commit, no box matches, or a matching box is offline (without --skip-offline)"
    add_command(
        actions,
        "status",
        "show each box that answers: versions and releases, pipelines, health",
        ["edge-runtime fleet --host mq.lan --key ops-2026.key --devices 'line-3-*' status"],
        {0: "every box answered", 1: "a box did not answer, or no box matches", 2: BAD_INPUT},
    )
    rollout = add_command(
        actions,
        "rollout",
        "roll a signed package archive out, a canary first, then in waves",
        [
            "edge-runtime fleet --key ops-2026.key rollout face-4.tar.gz --url https://files.lan/face-4.tar.gz",
            "edge-runtime fleet --key ops-2026.key rollout face-4.tar.gz --url URL --canary 2 --wave-size 20",
        ],
        {0: "every box committed the release", 1: failed, 2: BAD_INPUT},
    )
    rollout.add_argument("archive", help="the signed package archive, as the boxes will download it")
    rollout.add_argument("--url", required=True, help="where the boxes download the archive from")
    rollback = add_command(
        actions,
        "rollback",
        "go back one release of a package, a canary first, then in waves",
        ["edge-runtime fleet --key ops-2026.key --devices 'line-3-*' rollback face_detection"],
        {0: "every box went back", 1: failed, 2: BAD_INPUT},
    )
    rollback.add_argument("package", help="the package name")
    for action in (rollout, rollback):
        action.add_argument("--canary", type=int, default=1, metavar="N", help="boxes that go first, alone")
        action.add_argument(
            "--wave-size", type=int, default=0, metavar="N",
            help="boxes per wave after the canary; 0: each wave twice the one before",
        )  # fmt: skip
        action.add_argument(
            "--max-failures", type=float, default=0.0, metavar="PERCENT",
            help="percent of failed boxes that stops it",
        )  # fmt: skip
        action.add_argument(
            "--timeout", type=float, default=900.0, metavar="SECONDS",
            help="seconds a wave may take; boxes still rolling out then are aborted",
        )  # fmt: skip
        action.add_argument(
            "--skip-offline", action="store_true",
            help="go on without matching boxes that are offline (without it: list them, send nothing, exit 1)",
        )  # fmt: skip


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
