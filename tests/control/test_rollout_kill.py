"""A daemon killed with SIGKILL at each step of a rollout ends, after a restart, committed or on the release before."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from commanding import PREFIX, Fleet, Operator, make_fleet, stalling_url, write_config
from daemon_process import FACE_MODEL, DaemonProcess
from live_rollout import signed_release
from waiting import wait_for

from edge_runtime.control.signed import sign_command
from edge_runtime.package.archive import unpack


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with make_fleet(tmp_path_factory.mktemp("fleet")) as made:
        yield made


@pytest.mark.parametrize("stage", ["downloading", "shadow", "probation", "committed"])
def test_a_daemon_killed_mid_rollout_ends_committed_or_on_the_release_before(
    tmp_path: Path, fleet: Fleet, stage: str
) -> None:
    """SIGKILL while the rollout is in `stage`, restart: the release before runs, unless it had committed."""
    root = tmp_path
    (root / "keys").mkdir()
    for name in ("ops.pub", "packages.pub"):
        (root / "keys" / name).write_bytes((fleet.root / "keys" / name).read_bytes())
    (root / "installed").mkdir()
    unpack(signed_release(FACE_MODEL, root / "build-1", fleet.package_key, 1, "1.0"), root / "installed").rename(
        root / "installed" / "v1"
    )
    slow = {"shadow": {"items": 100_000, "max_seconds": 120}} if stage == "shadow" else {}
    long = {"probation": {"seconds": 120}} if stage == "probation" else {}
    settings = {"shadow": {"items": 10, "max_latency_ratio": 5.0}, "probation": {"seconds": 2}} | slow | long
    config = write_config(root, fleet.broker, device_id=f"kill-{stage}", rollout=settings,
                          mqtt={"host": fleet.broker.host, "port": fleet.broker.port, "client_id": f"kill-{stage}",
                                "topic_prefix": PREFIX})  # fmt: skip
    watcher = fleet.broker.subscribe_collect(f"{PREFIX}/kill-{stage}/#")
    results = f"{PREFIX}/kill-{stage}/faces/result"
    url, digest = fleet.release(10, "10.0")
    if stage == "downloading":
        url = stalling_url(fleet, tmp_path)
    daemon = DaemonProcess(config)
    try:
        assert watcher.wait_until(lambda m: sum(x.topic == results for x in m) >= 3, timeout=90), daemon.log
        client = Operator(fleet.broker, fleet.operator_key)
        args = {"rollout_id": "k", "package": "face_detection_short_range", "url": url, "sha256": digest}
        client.send(sign_command(fleet.operator_key, f"kill-{stage}", "rollout start", args), device=f"kill-{stage}")
        client.close()
        topic = f"{PREFIX}/kill-{stage}/rollout/k"
        reached = watcher.wait_until(lambda m: any(x.topic == topic and json.loads(x.payload)["stage"] == stage
                                                   for x in m), timeout=90)  # fmt: skip
        assert reached, daemon.log
        daemon.signal(signal.SIGKILL)
        daemon.wait(30)
    finally:
        if daemon.process.poll() is None:
            daemon.stop()
    start = len(watcher.payloads(results))
    restarted = DaemonProcess(config)
    try:
        assert watcher.wait_until(lambda m: sum(x.topic == results for x in m) >= start + 5, timeout=90), restarted.log

        def final_state() -> dict[str, Any]:
            return dict(json.loads(watcher.payloads(topic)[-1]))

        assert wait_for(lambda: final_state()["stage"] in ("committed", "rolled_back"), timeout=30), restarted.log
        final = final_state()
        versions = {json.loads(p)["model"]["version"] for p in watcher.payloads(results)[start:]}
    finally:
        restarted.stop()
    if stage == "committed":
        assert final["stage"] == "committed" and versions == {"10.0"}
    else:
        assert final["stage"] == "rolled_back", final
        assert final["reason"] == f"the box stopped while the rollout was {stage}; the release before runs"
        assert versions == {"1.0"}
