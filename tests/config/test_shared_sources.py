"""`sources:` and the pipelines that name them: what check-config refuses or says, and what a reload restarts."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.config import ConfigFileError, DaemonConfig, diff_pipelines, load_config

URL = "rtsp://camera-1.lan:554/stream1"


@pytest.fixture
def shared_config(base_config: dict[str, Any]) -> dict[str, Any]:
    """Two pipelines on the camera `door`, the first by the short form, the second with settings of its own."""
    model = base_config["pipelines"][0]["model"]
    base_config["sources"] = {"door": {"type": "stream", "url": URL}}
    base_config["pipelines"] = [
        {"name": "faces", "source": "door", "model": model},
        {"name": "slow", "source": {"type": "shared", "name": "door", "max_fps": 2, "motion": {}}, "model": model},
    ]
    return base_config


def problems_of(config: dict[str, Any], write_config: Any) -> list[str]:
    path = write_config(config)
    with pytest.raises(ConfigFileError) as caught:
        load_config(path)
    return [problem.removeprefix(f"{path}:") for problem in caught.value.problems]


def test_two_pipelines_name_one_camera(shared_config: dict[str, Any], write_config: Any) -> None:
    config = load_config(write_config(shared_config))
    assert [p.shared_source for p in config.pipelines] == ["door", "door"]
    assert config.pipelines[1].source.max_fps == 2 and config.pipelines[0].source.max_fps is None
    assert config.pipelines[0].is_camera


def test_a_source_name_nobody_gave_is_refused_at_its_field(shared_config: dict[str, Any], write_config: Any) -> None:
    shared_config["pipelines"][1]["source"]["name"] = "dor"
    [problem] = problems_of(shared_config, write_config)
    assert problem.endswith("pipelines[1].source.name: no source named 'dor' in sources: (known: door)"), problem
    assert problem.split(":")[0].isdigit()  # with its line


def test_a_name_nobody_gave_is_found_in_a_pipeline_with_other_mistakes(
    shared_config: dict[str, Any], write_config: Any
) -> None:
    shared_config["pipelines"][0]["source"] = "dor"
    shared_config["pipelines"][0]["publish"] = {"qos": 3}
    problems = problems_of(shared_config, write_config)
    assert any(" pipelines[0].publish.qos: " in p for p in problems), problems
    assert any(
        p.endswith(" pipelines[0].source.name: no source named 'dor' in sources: (known: door)") for p in problems
    )


def test_a_source_no_pipeline_uses_is_said_not_refused(
    shared_config: dict[str, Any], write_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    shared_config["sources"]["yard"] = {"type": "stream", "url": "rtsp://camera-2.lan/stream1"}
    shared_config["pipelines"][1]["enabled"] = False
    with caplog.at_level(logging.WARNING):
        load_config(write_config(shared_config))
    said = [record.getMessage() for record in caplog.records]
    assert any(s.endswith("sources.yard: no enabled pipeline uses this source, so it is not opened") for s in said), (
        said
    )
    assert not any("sources.door:" in s for s in said), said


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda c: c["sources"]["door"].update(motion={}), "sources.door.motion", "unknown field"),
        (lambda c: c["sources"]["door"].update(max_fps=5), "sources.door.max_fps", "unknown field"),
        (
            lambda c: c["pipelines"].append(
                {"name": "own", "source": {"type": "stream", "url": URL}, "model": c["pipelines"][0]["model"]}
            ),
            "pipelines[2].source.url",
            "this camera is also sources.door",
        ),
        (
            lambda c: c["sources"].update(again={"type": "stream", "url": URL}),
            "sources.again.url",
            "the same camera as sources.door",
        ),
        (
            lambda c: c["pipelines"][1]["source"].update(policy="every"),
            "pipelines[1].source.policy",
            "a shared source hands each pipeline its newest frame",
        ),
    ],
    ids=["motion-on-source", "rate-on-source", "inline-duplicate", "named-twice", "every"],
)
def test_settings_that_contradict_sharing_are_refused_at_their_field(
    shared_config: dict[str, Any], write_config: Any, change: Any, field: str, words: str
) -> None:
    change(shared_config)
    problems = problems_of(shared_config, write_config)
    assert len(problems) == 1 and f" {field}: " in problems[0] and words in problems[0], problems


def test_a_shared_file_must_play_in_real_time_and_exist(shared_config: dict[str, Any], write_config: Any) -> None:
    shared_config["sources"]["door"] = {"type": "file", "path": "missing.mp4"}
    problems = problems_of(shared_config, write_config)
    assert any(" sources.door.path: video file " in p and "does not exist" in p for p in problems), problems
    assert any(" sources.door.realtime: a file shared by pipelines" in p for p in problems), problems
    shared_config["sources"]["door"] = {"type": "file", "path": "video.mp4", "realtime": True}
    config = load_config(write_config(shared_config))
    assert config.sources["door"].path == write_config(shared_config).parent / "video.mp4"  # relative to the file


def test_only_cameras_can_be_named(shared_config: dict[str, Any], write_config: Any) -> None:
    shared_config["sources"]["door"] = {"type": "mqtt", "topics": ["a"], "window": {"length": 4, "stride": 4}}
    problems = problems_of(shared_config, write_config)
    assert problems[0].endswith(" sources.door: unknown source type 'mqtt'; expected one of: v4l2, stream, file")


def test_a_source_name_must_be_one_word(shared_config: dict[str, Any], write_config: Any) -> None:
    shared_config["sources"]["front door"] = shared_config["sources"].pop("door")
    problems = problems_of(shared_config, write_config)
    assert any(" sources: source name 'front door' cannot be" in p for p in problems), problems


def test_reload_restarts_only_what_changed_on_a_shared_camera(shared_config: dict[str, Any], tmp_path: Path) -> None:
    old = DaemonConfig.model_validate(shared_config)
    one_pipeline = copy.deepcopy(shared_config)
    one_pipeline["pipelines"][1]["source"]["max_fps"] = 3
    diff = diff_pipelines(old, DaemonConfig.model_validate(one_pipeline))
    assert diff.changed == ("slow",) and diff.unchanged == ("faces",)
    the_camera = copy.deepcopy(shared_config)
    the_camera["sources"]["door"]["transport"] = "udp"
    diff = diff_pipelines(old, DaemonConfig.model_validate(the_camera))
    assert diff.changed == ("faces", "slow") and not diff.restart_all
    unused_added = copy.deepcopy(shared_config)
    unused_added["sources"]["yard"] = {"type": "stream", "url": "rtsp://camera-2.lan/stream1"}
    assert diff_pipelines(old, DaemonConfig.model_validate(unused_added)).changed == ()
