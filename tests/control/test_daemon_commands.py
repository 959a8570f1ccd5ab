"""Commanding a real daemon over a real Mosquitto, and rolling out releases from a real HTTP server.

One daemon serves the tests of this module, in order, as an operator would use it.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator

import cv2
import numpy as np
import pytest
import yaml
from commanding import DEVICE, RESULTS, Fleet, Operator, make_fleet
from daemon_process import DaemonProcess
from waiting import wait_for

from edge_runtime.control.signed import sign_command
from edge_runtime.package.signing import generate_keys


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with make_fleet(tmp_path_factory.mktemp("fleet")) as made:
        yield made


@pytest.fixture(scope="module")
def daemon(fleet: Fleet) -> Iterator[DaemonProcess]:
    process = DaemonProcess(fleet.config)
    assert fleet.watcher.wait_until(lambda m: sum(x.topic == RESULTS for x in m) >= 3, timeout=90), process.log
    yield process
    process.stop()


@pytest.fixture
def operator(fleet: Fleet, daemon: DaemonProcess) -> Iterator[Operator]:
    client = Operator(fleet.broker, fleet.operator_key)
    yield client
    client.close()


def test_commands_nobody_trusted_signed_are_refused_and_the_box_runs_on(
    fleet: Fleet, daemon: DaemonProcess, operator: Operator
) -> None:
    stranger, _ = generate_keys("stranger", fleet.root / "stranger")
    good = sign_command(fleet.operator_key, DEVICE, "status")
    assert "report" in operator.send(good)["result"]
    refusals = {
        "replayed": (good, "replayed: nonce"),
        "unsigned": ({"command": "status"}, "unsigned: not a signed command"),
        "not json": (b"\xff status", "unsigned: the command is not valid JSON"),
        "too deep": (b"[" * 100_000, "unsigned: the command is nested deeper than 64 levels"),
        "stranger": (sign_command(stranger, DEVICE, "status"), "signed by unknown key"),
        "other box": (sign_command(fleet.operator_key, "gate-4", "status"), "signed for box 'gate-4'"),
        "tampered": ({**sign_command(fleet.operator_key, DEVICE, "status"), "command": "config get"}, "bad signature"),
    }
    for case, (document, why) in refusals.items():
        answer = operator.send(document)
        assert answer["code"] == 403 and why in answer["error"], (case, answer)
    report = operator.command("status")["result"]["report"]
    assert report["mqtt"]["commands_refused"] >= len(refusals)
    assert "faces" in report["pipelines"] and daemon.process.poll() is None
    assert "command refused: replayed" in daemon.log


def test_config_is_validated_and_applied_only_as_a_whole(fleet: Fleet, operator: Operator) -> None:
    text = fleet.config.read_text()
    bad = yaml.safe_load(text)
    bad["pipelines"][0]["model"]["threads"] = 0
    answer = operator.command("config validate", {"text": yaml.safe_dump(bad)})["result"]
    assert not answer["valid"] and any("pipelines[0].model.threads" in line for line in answer["problems"])
    refused = operator.command("config apply", {"text": yaml.safe_dump(bad)})
    assert refused["code"] == 422 and any("pipelines[0].model.threads" in line for line in refused["details"])
    assert fleet.config.read_text() == text  # nothing was applied
    good = yaml.safe_load(text)
    good["stats"]["interval_s"] = 2
    assert operator.command("config apply", {"text": yaml.safe_dump(good)})["result"]["applied"]
    assert yaml.safe_load(fleet.config.read_text())["stats"]["interval_s"] == 2
    assert fleet.config.with_name("config.yaml.previous").read_text() == text
    assert operator.command("config get")["result"]["text"] == fleet.config.read_text()


def test_a_pipeline_disabled_by_command_stops_and_comes_back(fleet: Fleet, operator: Operator) -> None:
    assert operator.command("pipeline disable", {"name": "faces"})["result"] == {"pipeline": "faces", "enabled": False}
    assert wait_for(lambda: "faces" not in operator.command("status")["result"]["report"]["pipelines"], timeout=20)
    assert operator.command("status")["result"]["disabled"] == ["faces"]
    settled = len(fleet.watcher.payloads(RESULTS))
    threading.Event().wait(1.5)
    assert len(fleet.watcher.payloads(RESULTS)) == settled  # no result while disabled
    operator.command("pipeline enable", {"name": "faces"})
    assert fleet.watcher.wait_until(lambda m: sum(x.topic == RESULTS for x in m) > settled + 3, timeout=60)
    assert operator.command("status")["result"]["disabled"] == []


def test_a_snapshot_and_the_models_on_request(fleet: Fleet, operator: Operator) -> None:
    snapshot = operator.command("snapshot", {"name": "faces"})["result"]
    image = cv2.imdecode(np.frombuffer(base64.b64decode(snapshot["jpeg"]), np.uint8), cv2.IMREAD_COLOR)
    assert image.shape == (480, 640, 3)
    assert operator.command("snapshot", {"name": "nothing"})["code"] == 404
    models = operator.command("models list")["result"]
    assert [(m["package"], m["version"], m["users"]) for m in models["loaded"]] == [
        ("face_detection_short_range", "1.0", ["faces"])
    ]
    assert operator.command("frobnicate")["code"] == 404


def test_a_release_from_an_http_server_is_rolled_out_and_rolled_back_by_command(
    fleet: Fleet, operator: Operator
) -> None:
    for number, version in ((2, "2.0"), (3, "3.0")):
        url, digest = fleet.release(number, version)
        start = len(fleet.watcher.payloads(RESULTS))
        args = {"rollout_id": f"r-{number}", "package": "face_detection_short_range", "url": url, "sha256": digest}
        assert operator.command("rollout start", args)["result"]["rollout"]["stage"] == "downloading"
        assert wait_for(lambda n=number: (fleet.rollout_state(f"r-{n}") or {}).get("stage") in ("committed",
                        "rolled_back"), timeout=90)  # fmt: skip
        state = fleet.rollout_state(f"r-{number}")
        assert state is not None and state["stage"] == "committed", state
        assert fleet.watcher.wait_until(lambda m, s=start: sum(x.topic == RESULTS for x in m) > s + 10, timeout=30)
        assert fleet.versions_since(start)[-1] == version
    releases = operator.command("models list")["result"]["releases"]["face_detection_short_range"]
    assert releases == {"installed": [2, 3], "active": 3}
    start = len(fleet.watcher.payloads(RESULTS))
    rollback = operator.command("rollback", {"package": "face_detection_short_range", "rollout_id": "back"})
    assert rollback["result"]["rollout"]["stage"] == "downloading", rollback
    ended = wait_for(lambda: (fleet.rollout_state("back") or {}).get("stage") in ("committed", "rolled_back"), 90)
    state = fleet.rollout_state("back") or {}
    assert ended and state["stage"] == "committed", (state.get("stage"), state.get("reason"))
    assert fleet.watcher.wait_until(lambda m: sum(x.topic == RESULTS for x in m) > start + 10, timeout=30)
    assert fleet.versions_since(start)[-1] == "2.0"
