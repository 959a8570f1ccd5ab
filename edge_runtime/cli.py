"""The `edge-runtime` command line.

Each sub-command lives in its own module under `edge_runtime/commands/`; this module only parses
arguments and turns the runtime's errors into one clear line and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from edge_runtime import __version__
from edge_runtime.backends import BACKENDS
from edge_runtime.commands.log_output import configure_logging
from edge_runtime.errors import EdgeRuntimeError

PRECISIONS = ("fp32", "fp16", "bf16", "int8")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edge-runtime", description="Edge inference runtime")
    parser.add_argument("--version", action="version", version=f"edge-runtime {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0,
        help="log what the runtime decides and why (-vv: debug, with OpenCV's and FFmpeg's own messages)",
    )  # fmt: skip
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    probe = commands.add_parser("probe", help="show the hardware, backends and profile of this box")
    probe.add_argument("--model", type=Path, help="also rank the backend choices for this model")
    probe.add_argument("--json", action="store_true", help="print JSON for programs")
    _add_box_options(probe)

    bench = commands.add_parser("bench", help="measure latency, throughput and fidelity of a model")
    bench.add_argument("model", type=Path, help="model package directory or model file")
    bench.add_argument("--backend", choices=list(BACKENDS), help="only this backend")
    bench.add_argument("--device", help="only this device, e.g. CPU, GPU, NPU, CUDA")
    bench.add_argument("--precision", choices=PRECISIONS, help="run at this precision")
    bench.add_argument("--variant", help="only this variant of the package, e.g. openvino/int8")
    bench.add_argument("--seconds", type=float, default=5.0, help="measuring time per choice (default 5)")
    bench.add_argument("--hint", choices=("latency", "throughput"), default="latency")
    bench.add_argument("--threads", type=int, help="inference threads (default: all cores)")
    bench.add_argument("--compare", action="store_true", help="check outputs against the fp32 CPU reference")
    bench.add_argument("--tolerance", type=float, help="largest error allowed, as a fraction of the output range")
    bench.add_argument("--select", action="store_true", help="measure every runnable choice, store the fastest")
    bench.add_argument("--json", action="store_true", help="print JSON for programs")
    _add_box_options(bench)

    check = commands.add_parser("check-config", help="validate a daemon config file without running it")
    check.add_argument("file", type=Path, help="the YAML config file")

    _add_signing_commands(commands)
    _add_fleet_commands(commands)

    run = commands.add_parser("run", help="run the daemon: pipelines from camera and sensor sources to MQTT")
    run.add_argument("--config", type=Path, default=Path("/etc/edge-runtime/config.yaml"), help="config file")
    run.add_argument("--root", type=Path, default=Path("/"), help="read hardware facts below this directory")
    run.add_argument("--profiles", type=Path, action="append", default=[], help="extra device profile directory")
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
        help="with --exit-when-done, how long to wait for the spool to reach the broker (default 300)",
    )
    return parser


def _add_signing_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from edge_runtime.commands.duration import parse_duration

    keys = commands.add_parser("keys", help="make the Ed25519 keys that sign model packages")
    keys_commands = keys.add_subparsers(dest="keys_command", required=True, metavar="KEYS_COMMAND")
    new = keys_commands.add_parser("new", help="write NAME.key (private, mode 0600) and NAME.pub")
    new.add_argument("name", help="the key's name, e.g. ops-2026")
    new.add_argument("--dir", type=Path, default=Path(), help="where to write the two files (default: here)")

    package = commands.add_parser("package", help="make, sign, verify or pack a model package")
    package_commands = package.add_subparsers(dest="package_command", required=True, metavar="PACKAGE_COMMAND")
    make = package_commands.add_parser(
        "make",
        help="package an exported model as it is (ONNX, OpenVINO IR, TFLite; Ultralytics' read from its metadata)",
    )
    make.add_argument("model", type=Path, help="the model file: .onnx, .xml (with its .bin) or .tflite")
    make.add_argument("-o", "--output", type=Path, required=True, help="the package folder to write (new or empty)")
    make.add_argument("--name", help="the package's name (default: the file's name)")
    make.add_argument("--version", default="1", help="the package's version (default: 1)")
    make.add_argument(
        "--task", help="classification, detection, keypoints, segmentation, ... (default: the metadata's)"
    )
    make.add_argument("--labels", help="labels file (one per line) or a comma-separated list (default: the metadata's)")
    make.add_argument("--decoder", help="output decoder, e.g. yolo, classification (default: the metadata's)")
    make.add_argument("--decoder-params", help="decoder parameters as a JSON object")
    sign = package_commands.add_parser("sign", help="write signature.json into a package")
    sign.add_argument("package", type=Path, help="model package directory")
    sign.add_argument("--key", type=Path, required=True, help="private key file (from `keys new`)")
    sign.add_argument("--release", type=int, required=True, help="release number; boxes refuse lower ones")
    sign.add_argument(
        "--expires-in", type=parse_duration, default=parse_duration("90d"), help="signature lifetime (default 90d)"
    )
    verify = package_commands.add_parser("verify", help="check a package, or its archive, as a box would")
    verify.add_argument("package", type=Path, help="model package directory or .tar/.tar.gz archive")
    verify.add_argument("--trust", type=Path, nargs="+", required=True, metavar="PUBKEY", help="trusted public keys")
    verify.add_argument("--installed-release", type=int, help="refuse releases lower than this one, as a box would")
    pack = package_commands.add_parser("pack", help="write a package as one reproducible tar archive")
    pack.add_argument("package", type=Path, help="model package directory")
    pack.add_argument("-o", "--output", type=Path, required=True, help="archive to write (.tar, .tar.gz)")


def _add_fleet_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fleet = commands.add_parser("fleet", help="command the boxes of a fleet over the broker")
    fleet.add_argument("--host", default="localhost", help="the broker (default localhost)")
    fleet.add_argument("--port", type=int, default=1883, help="the broker's port (default 1883)")
    fleet.add_argument("--prefix", default="edge", help="the boxes' topic prefix (default edge)")
    fleet.add_argument("--key", required=True, help="the operator's private key (from `keys new`)")
    fleet.add_argument("--username", help="broker user name; the password is read from $MQTT_PASSWORD")
    fleet.add_argument("--devices", default="*", help="device ids to act on, a shell pattern (default all)")
    actions = fleet.add_subparsers(dest="fleet_command", required=True, metavar="FLEET_COMMAND")
    actions.add_parser("status", help="each box that answers: versions and releases, pipelines, health")
    for name, what in (("rollout", "roll a signed package archive out"), ("rollback", "go back one release")):
        action = actions.add_parser(name, help=what)
        if name == "rollout":
            action.add_argument("archive", help="the signed package archive, as the boxes will download it")
            action.add_argument("--url", required=True, help="where the boxes download the archive from")
        else:
            action.add_argument("package", help="the package name")
        action.add_argument("--canary", type=int, default=1, help="boxes that go first, alone (default 1)")
        action.add_argument("--wave-size", type=int, default=0, help="boxes per wave after the canary")
        action.add_argument("--max-failures", type=float, default=0.0, help="percent of failed boxes that stops it")
        action.add_argument(
            "--timeout", type=float, default=900.0,
            help="seconds a wave may take; boxes still rolling out then are aborted (default 900)",
        )  # fmt: skip
        action.add_argument(
            "--skip-offline", action="store_true",
            help="go on without matching boxes that are offline (without it: list them, send nothing, exit 1)",
        )  # fmt: skip


def _add_box_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", type=Path, default=Path("/"), help="read hardware facts below this directory")
    parser.add_argument("--profiles", type=Path, action="append", default=[], help="extra device profile directory")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where the service keeps choices stored by `bench --select` and int8 checks "
        "(default: $STATE_DIRECTORY, else /var/lib/edge-runtime, as the service)",
    )


def log_level(verbose: int, quiet: bool, command: str) -> int:
    """`run` is a service and says what it does (INFO); the other commands speak only when asked."""
    if verbose >= 2:
        return logging.DEBUG
    if quiet:
        return logging.WARNING
    return logging.INFO if verbose or command == "run" else logging.WARNING


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(log_level(args.verbose, args.quiet, args.command))
    try:
        if args.command == "probe":
            from edge_runtime.commands.probe import run_probe

            return run_probe(args)
        if args.command == "check-config":
            from edge_runtime.commands.check_config import run_check_config

            return run_check_config(args)
        if args.command == "keys":
            from edge_runtime.commands.keys import run_keys

            return run_keys(args)
        if args.command == "package":
            from edge_runtime.commands.package import run_package

            return run_package(args)
        if args.command == "fleet":
            from edge_runtime.commands.fleet import run_fleet

            return run_fleet(args)
        if args.command == "run":
            from edge_runtime.service.daemon import run_daemon

            return run_daemon(args)
        from edge_runtime.commands.bench import run_bench

        return run_bench(args)
    except EdgeRuntimeError as error:
        print(f"edge-runtime: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
