"""Valid configs: the shipped example, defaults, paths relative to the file, overrides merged with the manifest."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.config import ConfigFileError, DaemonConfig, load_config
from edge_runtime.package.loader import open_package
from edge_runtime.sources.configs import FileSourceConfig, MqttSourceConfig

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "config.example.yaml"


def test_the_example_config_is_valid(face_package_dir: Path) -> None:
    config = load_config(EXAMPLE, environ={})
    assert config.device_id == "demo-box-01"
    camera, sensor = config.pipelines
    assert isinstance(camera.source, FileSourceConfig) and camera.enabled
    assert camera.model.path.resolve() == face_package_dir.resolve()
    assert camera.publish.snapshot.enabled and camera.publish.min_score == 0.6
    assert isinstance(sensor.source, MqttSourceConfig) and not sensor.enabled
    assert sensor.source.window.length == 128 and sensor.source.window.channels == 3
    assert [p.name for p in config.enabled_pipelines] == ["entrance-faces"]


def test_the_example_config_takes_the_device_id_from_the_environment() -> None:
    assert load_config(EXAMPLE, environ={"EDGE_DEVICE_ID": "gate-3"}).device_id == "gate-3"


def test_defaults(base_config: dict[str, Any], write_config: Any, tmp_path: Path) -> None:
    environ = {"STATE_DIRECTORY": f"{tmp_path}/state-a:{tmp_path}/state-b", "CACHE_DIRECTORY": f"{tmp_path}/cache"}
    config = load_config(write_config(base_config), environ=environ)
    assert config.state_dir == tmp_path / "state-a"
    assert config.cache_dir == tmp_path / "cache"
    assert config.stats.interval_s == 30 and not config.stats.prometheus.enabled
    assert config.stats.prometheus.port == 9464 and config.stats.prometheus.host == "127.0.0.1"
    assert config.log_level == "info"
    publish = config.pipelines[0].publish
    assert (publish.qos, publish.retain, publish.only_on_change, publish.min_score) == (1, False, False, None)
    assert publish.snapshot.max_rate_hz == 0.2 and publish.snapshot.jpeg_quality == 80


def test_relative_paths_are_relative_to_the_config_file(
    base_config: dict[str, Any],
    write_config: Any,
    face_package_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config_dir = tmp_path / "etc"
    base_config["pipelines"][0]["model"]["path"] = os.path.relpath(face_package_dir, config_dir)
    base_config |= {"state_dir": "state", "log_level": "DEBUG"}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(write_config(base_config), environ={})
    pipeline = config.pipelines[0]
    assert pipeline.model.path.resolve() == face_package_dir.resolve()
    assert pipeline.source.path == config_dir / "video.mp4"  # type: ignore[union-attr]
    assert config.state_dir == config_dir / "state"
    assert config.log_level == "debug"


def test_a_bare_model_file_is_accepted(base_config: dict[str, Any], write_config: Any, tiny_onnx: Path) -> None:
    base_config["pipelines"][0]["model"] = {"path": str(tiny_onnx), "variant": "onnx/fp32", "backend": "onnxruntime"}
    assert load_config(write_config(base_config), environ={}).pipelines[0].model.path == tiny_onnx


def test_a_disabled_pipeline_may_name_a_model_not_yet_deployed(base_config: dict[str, Any], write_config: Any) -> None:
    base_config["pipelines"].append(
        {"name": "later", "enabled": False, "source": {"type": "v4l2", "device": 0}, "model": {"path": "absent/"}}
    )
    assert [p.enabled for p in load_config(write_config(base_config), environ={}).pipelines] == [True, False]
    base_config["pipelines"][1]["enabled"] = True
    with pytest.raises(ConfigFileError, match=r"pipelines\[1\].model.path: pipeline 'later': model not found"):
        load_config(write_config(base_config), environ={})


def test_overrides_merge_with_the_manifest(
    base_config: dict[str, Any], write_config: Any, face_package_dir: Path
) -> None:
    base_config["pipelines"][0] |= {
        "decoder": {"params": {"iou_threshold": 0.45}},
        "preprocess": {"color_order": "BGR", "resize": "stretch", "pad_value": 114},
    }
    pipeline = load_config(write_config(base_config), environ={}).pipelines[0]
    manifest = open_package(face_package_dir).manifest
    assert pipeline.decoder is not None and pipeline.preprocess is not None
    decoder = pipeline.decoder.applied_to(manifest.decoder)
    assert decoder.name == "ssd_anchors" and decoder.params["iou_threshold"] == 0.45
    assert decoder.params["num_layers"] == 4  # the manifest's other parameters are kept
    spec = pipeline.preprocess.applied_to(manifest.inputs[0])
    assert (spec.color_order, spec.resize, spec.mean, spec.pad_value) == ("BGR", "stretch", (127.5,), (114,))


def test_a_config_built_in_code_validates_the_same_way(face_package_dir: Path) -> None:
    data = {"device_id": "x", "pipelines": [{"name": "a", "source": {"type": "v4l2", "device": "/dev/video0"}}]}
    with pytest.raises(ValueError, match="model"):
        DaemonConfig.model_validate(data)
    data["pipelines"][0]["model"] = {"path": str(face_package_dir)}  # type: ignore[index]
    assert DaemonConfig.model_validate(data).pipelines[0].is_camera


def test_anchors_and_merge_keys_share_settings(write_config: Any, face_package_dir: Path) -> None:
    text = f"""device_id: box-1
pipelines:
  - &camera
    name: door
    source: {{type: stream, url: "rtsp://door.local/live"}}
    model: {{path: {face_package_dir}, threads: 2}}
  - <<: *camera
    name: yard
    source: {{type: stream, url: "rtsp://yard.local/live"}}
"""
    door, yard = load_config(write_config(text), environ={}).pipelines
    assert yard.model == door.model and yard.model.threads == 2
    assert yard.source.url == "rtsp://yard.local/live"  # type: ignore[union-attr]
    with pytest.raises(ConfigFileError, match=r":10: pipelines\[1\].name: duplicate key \(first given on line 8\)"):
        load_config(write_config(text + "    name: garden\n"), environ={})


def test_a_decoder_override_needs_a_name_when_the_manifest_has_no_decoder(
    base_config: dict[str, Any], write_config: Any, tiny_onnx: Path
) -> None:
    base_config["pipelines"][0] |= {"model": {"path": str(tiny_onnx)}, "decoder": {"params": {"top_k": 3}}}
    with pytest.raises(ConfigFileError, match=r"pipelines\[0\].decoder: the model's manifest names no decoder"):
        load_config(write_config(base_config), environ={})
