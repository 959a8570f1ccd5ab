"""The command lines of the commands that make, sign and roll out releases: `keys`, `package` and `fleet`.

Kept apart from `edge_runtime.cli`, which holds the box's own commands (run, health, check-config, probe,
bench); the parsers are built the same way, with `add_command`, and the reference pages are generated
from them all.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from edge_runtime.commands.help_text import add_command

if TYPE_CHECKING:
    from edge_runtime.commands.help_text import Commands

__all__ = ["add_fleet_commands", "add_signing_commands"]


def add_signing_commands(commands: Commands, bad_input: str) -> None:
    from edge_runtime.commands.duration import parse_duration

    keys = add_command(
        commands,
        "keys",
        "make the Ed25519 keys that sign model packages and operators' commands",
        ["edge-runtime keys new ops-2026 --dir /secure/keys"],
        {0: "written", 2: bad_input},
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
        {0: "done", 2: bad_input},
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
        {0: "written, and it loads on this box", 2: bad_input},
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
        {0: "signed", 2: bad_input},
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
        {0: "written", 2: bad_input},
    )
    pack.add_argument("package", type=Path, help="model package directory")
    pack.add_argument("-o", "--output", type=Path, required=True, help="archive to write (.tar, .tar.gz)")


def add_fleet_commands(commands: Commands, bad_input: str) -> None:
    fleet = add_command(
        commands,
        "fleet",
        "command the boxes of a fleet over the broker: status, rollout, rollback",
        ["edge-runtime fleet --host mq.lan --key ops-2026.key status"],
        {0: "every box did as told", 1: "a box failed, did not answer or is offline", 2: bad_input},
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
        {0: "every box answered", 1: "a box did not answer, or no box matches", 2: bad_input},
    )
    rollout = add_command(
        actions,
        "rollout",
        "roll a signed package archive out, a canary first, then in waves",
        [
            "edge-runtime fleet --key ops-2026.key rollout face-4.tar.gz --url https://files.lan/face-4.tar.gz",
            "edge-runtime fleet --key ops-2026.key rollout face-4.tar.gz --url URL --canary 2 --wave-size 20",
        ],
        {0: "every box committed the release", 1: failed, 2: bad_input},
    )
    rollout.add_argument("archive", help="the signed package archive, as the boxes will download it")
    rollout.add_argument("--url", required=True, help="where the boxes download the archive from")
    rollback = add_command(
        actions,
        "rollback",
        "go back one release of a package, a canary first, then in waves",
        ["edge-runtime fleet --key ops-2026.key --devices 'line-3-*' rollback face_detection"],
        {0: "every box went back", 1: failed, 2: bad_input},
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
