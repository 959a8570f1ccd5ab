"""`select: fastest` in the running service: measured once per release while the profile's choice runs, the
pipeline moved onto the winner between two frames, and the stored choice taken at the next start."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker import Mosquitto, Received
from daemon_process import FACE_MODEL, DaemonProcess, face_pipeline, results

from edge_runtime.package.loader import open_package
from edge_runtime.placement.selection import load_stored_choice, model_key

RESULT_TOPIC = "edge/test-box/faces/result"
STATS_TOPIC = "edge/test-box/stats"


def _selection_state(payloads: list[bytes]) -> dict[str, Any]:
    if not payloads:
        return {}
    runtime: dict[str, Any] = json.loads(payloads[-1])["pipelines"].get("faces", {}).get("runtime", {})
    return dict(runtime.get("select_fastest", {}))


def test_a_pipeline_set_to_select_fastest_moves_to_the_measured_choice_without_losing_a_frame(
    mosquitto: Mosquitto,
    clip: Callable[[int], Path],
    write_config: Callable[..., Path],
    run_daemon: Callable[..., DaemonProcess],
    tmp_path: Path,
) -> None:
    watcher = mosquitto.subscribe_collect("edge/test-box/#")
    video = clip(900)
    source = {"type": "file", "path": str(video), "realtime": True}  # 90 s at 10 fps: longer than measuring
    pipeline = face_pipeline(video, source=source, model={"path": str(FACE_MODEL), "select": "fastest"})
    config = write_config(mosquitto, [pipeline])
    daemon = run_daemon(config)

    def chosen(messages: list[Received]) -> bool:
        return _selection_state([m.payload for m in messages if m.topic == STATS_TOPIC]).get("state") == "chosen"

    assert watcher.wait_until(chosen, timeout=150), daemon.log
    stored = load_stored_choice(tmp_path / "state", model_key(open_package(FACE_MODEL)))
    assert stored is not None and stored.chosen_by == "select: fastest"
    assert stored.metrics["max_rel_error"] <= 0.02

    def runs_stored(message: dict[str, Any]) -> bool:
        return bool(message["model"]["variant"] == stored.variant_id) and (
            message["runtime"]["backend"] == stored.choice.backend
        )

    assert watcher.wait_until(
        lambda m: any(runs_stored(r) for r in results([x.payload for x in m[-20:] if x.topic == RESULT_TOPIC])),
        timeout=30,
    ), daemon.log
    assert daemon.stop() == 0, daemon.log
    messages = results(watcher.payloads(RESULT_TOPIC))
    indices = sorted(int(m["index"]) for m in messages)
    assert indices == list(range(len(indices))), "a frame was lost or ran twice through the switch"
    assert runs_stored(max(messages, key=lambda m: int(m["index"])))
    assert "no choice measured on this box yet" in daemon.log

    again = mosquitto.subscribe_collect(RESULT_TOPIC)
    second = run_daemon(config)
    assert again.wait_count(3, timeout=60), second.log
    assert second.stop() == 0, second.log
    assert all(runs_stored(m) for m in results(again.payloads(RESULT_TOPIC)))
    assert "no choice measured on this box yet" not in second.log
