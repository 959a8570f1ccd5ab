"""A pipeline's cascade section: checked on its own, against the track section, and by `check-config` against the
models it names: a stage on a label the detector never produces, or attaching what its model cannot give,
is refused with the field's path."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from edge_runtime.commands.check_config import run_check_config
from edge_runtime.config.cascade import CascadeStageConfig
from edge_runtime.config.schema import PipelineConfig

LANDMARKS = Path(__file__).resolve().parents[2] / "samples" / "models" / "face_landmark"


def stage(**fields: Any) -> dict[str, Any]:
    return {"name": "landmarks", "model": {"path": str(LANDMARKS)}, "labels": ["face"]} | fields


def check_config(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    status = run_check_config(argparse.Namespace(file=path))
    return status, capsys.readouterr().err.splitlines()


@pytest.fixture
def config(base_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return base_config | {"state_dir": str(tmp_path / "state"), "cache_dir": str(tmp_path / "cache")}


def test_a_stage_takes_its_defaults_from_deepstream_and_frigate() -> None:
    parsed = CascadeStageConfig.model_validate(stage())
    assert (parsed.attach, parsed.padding, parsed.batch, parsed.max_crops) == ("attributes", 0.0, "faster", 16)
    assert (parsed.reinfer.area_growth, parsed.reinfer.interval_s) == (0.2, 1.0)
    assert (parsed.consensus.min_attempts, parsed.consensus.min_agreement) == (3, 0.6)


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"labels": []}, "labels"),
        ({"labels": ["face", "face"]}, "labels listed twice: face"),
        ({"attach": "name"}, "attach"),
        ({"padding": -0.1}, "padding"),
        ({"name": "a/b"}, "cannot be an MQTT topic level"),
        ({"max_crops": 0}, "max_crops"),
        ({"consensus": {"min_attempts": 4, "window": 2}}, "window (2) must be at least min_attempts (4)"),
        ({"detector": "x"}, "detector"),
    ],
)
def test_a_bad_stage_is_refused_naming_its_field(fields: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError) as raised:
        CascadeStageConfig.model_validate(stage(**fields))
    assert fragment in str(raised.value)


def pipeline(**fields: Any) -> dict[str, Any]:
    return {
        "name": "faces",
        "source": {"type": "file", "path": "video.mp4"},
        "model": {"path": "models/face"},
    } | fields


def test_two_stages_with_one_name_are_refused_naming_both() -> None:
    with pytest.raises(ValidationError, match=r"'landmarks' is used by cascade\[0\] and cascade\[1\]"):
        PipelineConfig.model_validate(pipeline(cascade=[stage(), stage()]))


def test_with_a_track_section_naming_labels_a_stage_label_must_be_tracked() -> None:
    with pytest.raises(ValidationError) as raised:
        PipelineConfig.model_validate(pipeline(track={"labels": ["face"]}, cascade=[stage(labels=["face", "hand"])]))
    [error] = raised.value.errors()
    assert error["loc"] == ("cascade", 0, "labels", 1) and "'hand' is not tracked" in error["msg"]
    PipelineConfig.model_validate(pipeline(track={}, cascade=[stage(labels=["hand"])]))  # every label tracked
    PipelineConfig.model_validate(pipeline(cascade=[stage(labels=["hand"])]))  # no tracking: per frame


def test_a_sensor_pipeline_cannot_have_a_cascade() -> None:
    sensor = {"type": "mqtt", "topics": ["sensors/a"], "window": {"length": 64, "stride": 32}}
    with pytest.raises(ValidationError, match="cascade needs a camera source"):
        PipelineConfig.model_validate(pipeline(source=sensor, cascade=[stage()]))


def test_a_cascade_on_the_detector_s_labels_passes_check_config(
    config: dict[str, Any], write_config: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config["pipelines"][0]["cascade"] = [stage(padding=0.25)]
    assert check_config(write_config(config), capsys) == (0, [])


def test_a_stage_on_a_label_the_detector_never_produces_is_refused_by_check_config(
    config: dict[str, Any], write_config: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config["pipelines"][0]["cascade"] = [stage(labels=["face", "licence_plate"])]
    path = write_config(config)
    status, lines = check_config(path, capsys)
    assert status == 2
    assert any(
        ": pipelines[0].cascade[0].labels[1]: the detector, model face_detection_short_range, never produces "
        "label 'licence_plate', so the stage would never run; its labels: face" in line
        for line in lines
    ), lines
    assert lines[-1] == f"{path}: 1 problem", lines


def test_check_config_refuses_what_a_stage_s_model_cannot_attach_and_a_missing_stage_model(
    config: dict[str, Any], write_config: Any, face_package_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config["pipelines"][0]["cascade"] = [
        stage(attach="sub_label"),  # landmarks are no class
        stage(name="who", model={"path": str(face_package_dir)}),  # a detector gives no attributes
        stage(name="gone", model={"path": "models/not-there"}),
    ]
    status, lines = check_config(write_config(config), capsys)
    assert status == 2
    expected = [
        ("pipelines[0].cascade[0].attach", "attach: sub_label takes classification results; model face_landmark"),
        ("pipelines[0].cascade[1].attach", "takes classification or keypoints results"),
        ("pipelines[0].cascade[2].model.path", "pipeline 'faces' cascade stage 'gone': model not found"),
    ]
    for field, fragment in expected:
        assert any(f": {field}: " in line and fragment in line for line in lines), (field, lines)
