"""`edge-runtime fleet` over three real daemons on one Mosquitto: canary first, then waves; a bad release stops
at its canary."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from commanding import PREFIX, Fleet, make_fleet, stalling_url, write_config
from daemon_process import FACE_MODEL, DaemonProcess
from live_rollout import signed_release

from edge_runtime.package.archive import unpack

BOXES = ("box-a", "box-b", "box-c")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with make_fleet(tmp_path_factory.mktemp("fleet")) as made:
        yield made


@pytest.fixture(scope="module")
def daemons(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, DaemonProcess]]:
    watcher = fleet.broker.subscribe_collect(f"{PREFIX}/+/faces/result")
    started = {}
    for device in BOXES:
        root = tmp_path_factory.mktemp(device)
        (root / "keys").mkdir()
        for name in ("ops.pub", "packages.pub"):
            (root / "keys" / name).write_bytes((fleet.root / "keys" / name).read_bytes())
        (root / "installed").mkdir()
        first = unpack(signed_release(FACE_MODEL, root / "build-1", fleet.package_key, 1, "1.0"), root / "installed")
        first.rename(root / "installed" / "v1")
        mqtt = {"host": fleet.broker.host, "port": fleet.broker.port, "client_id": device, "topic_prefix": PREFIX}
        started[device] = DaemonProcess(write_config(root, fleet.broker, device_id=device, mqtt=mqtt))
    for device, daemon in started.items():
        topic = f"{PREFIX}/{device}/faces/result"
        assert watcher.wait_until(lambda m, t=topic: any(x.topic == t for x in m), timeout=120), daemon.log
    yield started
    for daemon in started.values():
        daemon.stop()


def fleet_command(fleet: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    broker = ["--host", fleet.broker.host, "--port", str(fleet.broker.port), "--prefix", PREFIX]
    command = [sys.executable, "-m", "edge_runtime", "fleet", *broker, "--key", str(fleet.operator_key), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)


def rollout_id_in(output: str) -> str:
    """The id the command announces first: 'rollout fleet-...: ...'."""
    return output.split()[1].rstrip(":")


def test_status_lists_every_box_that_answers(fleet: Fleet, daemons: dict[str, DaemonProcess]) -> None:
    result = fleet_command(fleet, "status")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["box", "broker", "models", "pipelines", "last", "rollout"]
    assert [line.split()[0] for line in lines[1:]] == list(BOXES)
    assert all(line.split()[1:3] == [f"127.0.0.1:{fleet.broker.port}", "(0"] for line in lines[1:])
    assert all("face_detection_short_range 1.0 (release 1)" in line for line in lines[1:])


def test_a_good_release_goes_canary_first_then_in_waves(fleet: Fleet, daemons: dict[str, DaemonProcess]) -> None:
    url, _ = fleet.release(2, "2.0")
    archive = fleet.releases / "release-2.tar"
    result = fleet_command(fleet, "--devices", "box-*", "rollout", str(archive), "--url", url, "--canary", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = result.stdout.splitlines()[-4:]
    assert [line.split()[:4] for line in summary] == [
        ["box", "wave", "outcome", "release"],
        ["box-a", "0", "committed", "2"],
        ["box-b", "1", "committed", "2"],
        ["box-c", "1", "committed", "2"],
    ]
    progress = result.stdout.splitlines()[:-4]
    canary_done = next(i for i, line in enumerate(progress) if line.endswith("box-a: committed"))
    wave_sent = next(i for i, line in enumerate(progress) if "box-b: sent" in line)
    assert canary_done < wave_sent  # the wave started only once the canary had committed


def test_a_release_whose_canary_fails_never_reaches_the_others(fleet: Fleet, daemons: dict[str, DaemonProcess]) -> None:
    def broken_decoder(manifest: dict[str, Any], root: Path) -> None:
        manifest["decoder"]["params"]["num_layers"] = 5  # anchors that do not match the model's outputs

    archive = signed_release(FACE_MODEL, fleet.root / "build-bad", fleet.package_key, 3, "3.0", edit=broken_decoder)
    served = fleet.releases / "release-3-bad.tar"
    archive.replace(served)
    result = fleet_command(
        fleet, "--devices", "box-*", "rollout", str(served), "--url", f"{fleet.url}/{served.name}", "--canary", "1"
    )
    assert result.returncode == 1, result.stdout + result.stderr
    summary = [line.split()[:3] for line in result.stdout.splitlines()[-3:]]
    assert summary == [["box-a", "0", "rolled_back"], ["box-b", "1", "not"], ["box-c", "1", "not"]]
    assert "shadow of pipeline faces" in result.stdout and "a canary failed" in result.stdout
    rollout_id = rollout_id_in(result.stdout)
    for device in ("box-b", "box-c"):
        assert rollout_id not in daemons[device].log  # the command never went to them
    versions = fleet_command(fleet, "status")
    assert all("face_detection_short_range 2.0" in line for line in versions.stdout.splitlines()[1:]), versions.stdout


def test_offline_boxes_are_listed_and_nothing_is_sent_unless_skipped_then_a_wave_left_behind_is_aborted(
    fleet: Fleet, daemons: dict[str, DaemonProcess], tmp_path: Path
) -> None:
    """A box whose last will says offline would miss the release unnoticed; a box still downloading when
    its wave times out would go on and perhaps commit after the run reported it failed."""
    fleet.broker.publish(f"{PREFIX}/box-z/status", b"offline", retain=True)  # as a dead box's last will leaves
    try:
        fleet.release(4, "4.0")
        archive, url = str(fleet.releases / "release-4.tar"), stalling_url(fleet, tmp_path)
        refused = fleet_command(fleet, "--devices", "box-*", "rollout", archive, "--url", url)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "1 box(es) matching 'box-*' are offline: box-z; nothing was sent" in refused.stderr
        assert "--skip-offline" in refused.stderr and "rollout fleet-" not in refused.stdout
        status = fleet_command(fleet, "status")
        assert status.returncode == 1, status.stdout + status.stderr  # not every box is there
        assert [line.split()[0] for line in status.stdout.splitlines()[1:]] == [*BOXES, "box-z"]
        assert status.stdout.splitlines()[-1].split() == ["box-z", "-", "-", "-", "offline"]
        result = fleet_command(
            fleet, "--devices", "box-*", "rollout", archive, "--url", url, "--timeout", "3", "--skip-offline"
        )
    finally:
        fleet.broker.publish(f"{PREFIX}/box-z/status", b"", retain=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "skipping offline boxes: box-z" in result.stdout
    summary = result.stdout.splitlines()[-3:]
    assert summary[0].split()[:3] == ["box-a", "0", "failed"], result.stdout
    assert "no final state within 3 s (last: downloading); rollout abort sent: the box rolls back" in summary[0]
    assert [line.split()[:3] for line in summary[1:]] == [["box-b", "1", "not"], ["box-c", "1", "not"]]
    states = fleet.broker.subscribe_collect(f"{PREFIX}/box-a/rollout/{rollout_id_in(result.stdout)}")
    assert states.wait_until(
        lambda got: any(json.loads(m.payload).get("stage") == "rolled_back" for m in got), timeout=30
    ), daemons["box-a"].log
    final = json.loads(states.payloads()[-1])
    assert final["reason"] == "aborted during the download; the bytes fetched are removed"
