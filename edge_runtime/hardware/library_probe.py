"""Probing the backend libraries in a child process.

Importing OpenVINO, ONNX Runtime and LiteRT to ask what they can do costs 25 to 45 MB of resident
memory each, for as long as the process lives. The daemon runs one of them; asking in a child process
keeps the others out of its memory on small boxes.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from dataclasses import asdict
from typing import Any

from edge_runtime.backends.base import BackendStatus
from edge_runtime.hardware.facts import OpenVinoDevice

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 120.0

Probed = tuple[dict[str, BackendStatus], tuple[OpenVinoDevice, ...]]


def probe_in_child() -> Probed | None:
    """What each library can use, asked in a child process; None (and a warning) if the child failed."""
    command = [sys.executable, "-m", "edge_runtime.hardware.library_probe"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=True)
        return decode(json.loads(done.stdout))
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError) as error:
        log.warning("probing backend libraries in a child process failed (%s); probing here instead", error)
        return None


def encode(probed: Probed) -> dict[str, Any]:
    statuses, devices = probed
    return {
        "libraries": {key: asdict(status) for key, status in statuses.items()},
        "openvino": [asdict(d) for d in devices],
    }


def decode(data: dict[str, Any]) -> Probed:
    statuses = {
        key: BackendStatus(**{**fields, "devices": tuple(fields["devices"])})
        for key, fields in data["libraries"].items()
    }
    devices = tuple(
        OpenVinoDevice(name=d["name"], full_name=d["full_name"], capabilities=tuple(d["capabilities"]))
        for d in data["openvino"]
    )
    return statuses, devices


def main() -> None:
    from edge_runtime.hardware.detect import openvino_devices, probe_backend_libraries

    statuses = probe_backend_libraries()
    print(json.dumps(encode((statuses, openvino_devices(statuses.get("openvino"))))))


if __name__ == "__main__":
    main()
