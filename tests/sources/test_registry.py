"""Every source type in the config schema has an implementation that `make_source` finds."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from edge_runtime.errors import ConfigError
from edge_runtime.sources import SOURCES, make_source
from edge_runtime.sources.base import SourceContext
from edge_runtime.sources.camera import CameraSource
from edge_runtime.sources.configs import AnySource
from edge_runtime.sources.folder import ImageFolderSource
from edge_runtime.sources.mqtt_sensor import MqttSensor
from edge_runtime.sources.replay import ReplaySensor
from edge_runtime.sources.serial_sensor import SerialSensor
from edge_runtime.sources.shared import SharedSourceConsumer, SharedSources

WINDOW = {"length": 4, "stride": 2}
CONFIGS = {
    "v4l2": ({"device": 0}, CameraSource),
    "stream": ({"url": "rtsp://cam/1"}, CameraSource),
    "file": ({"path": "clip.mp4"}, CameraSource),
    "shared": ({"name": "door"}, SharedSourceConsumer),
    "folder": ({"path": "pictures"}, ImageFolderSource),
    "mqtt": ({"topics": ["a/b"], "window": WINDOW}, MqttSensor),
    "serial": ({"port": "/dev/ttyUSB0", "window": WINDOW}, SerialSensor),
    "replay": ({"path": "data.csv", "window": WINDOW}, ReplaySensor),
}


def test_the_registry_covers_the_schema() -> None:
    union = typing.get_args(typing.get_args(AnySource)[0])
    schema_types = {typing.get_args(config.model_fields["type"].annotation)[0] for config in union}
    assert schema_types == set(SOURCES) == set(CONFIGS)


@pytest.mark.parametrize("source_type", sorted(CONFIGS))
def test_make_source_builds_each_type_without_starting_it(source_type: str) -> None:
    fields, expected = CONFIGS[source_type]
    config = TypeAdapter(AnySource).validate_python({"type": source_type, **fields})
    source = make_source(config, f"{source_type}-1", SourceContext(shared=SharedSources({})))
    assert type(source) is expected
    assert source.name == f"{source_type}-1" and not source.stats.connected


def test_a_camera_url_with_a_password_is_masked_in_its_description() -> None:
    config = TypeAdapter(AnySource).validate_python({"type": "stream", "url": "rtsp://admin:pw@10.0.0.2/h264"})
    source = make_source(config, "yard")
    assert isinstance(source, CameraSource)
    assert source.target == "rtsp://admin:***@10.0.0.2/h264"


def test_unknown_type_is_a_config_error() -> None:
    class Odd:
        type = "carrier-pigeon"

    with pytest.raises(
        ConfigError, match="unknown source type 'carrier-pigeon'; known: v4l2, stream, file, shared, folder"
    ):
        make_source(Odd(), "x")  # type: ignore[arg-type]


def test_a_shared_source_outside_the_daemon_is_a_config_error() -> None:
    config = TypeAdapter(AnySource).validate_python({"type": "shared", "name": "door"})
    with pytest.raises(ConfigError, match="shared sources need the daemon's `sources:`"):
        make_source(config, "shared:door", SourceContext())


def test_motion_keepalive_and_serial_reconnect_are_configurable(tmp_path: Path) -> None:
    file_config = TypeAdapter(AnySource).validate_python(
        {"type": "file", "path": str(tmp_path), "motion": {"keepalive_s": None}}
    )
    assert file_config.motion is not None and file_config.motion.keepalive_s is None  # type: ignore[union-attr]
    serial_config = TypeAdapter(AnySource).validate_python(
        {"type": "serial", "port": "/dev/ttyACM0", "window": WINDOW, "reconnect": {"initial_s": 2}}
    )
    assert serial_config.reconnect.initial_s == 2  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("source_type", "settings", "unpaced"),
    [
        ("v4l2", {}, False),
        ("stream", {}, False),
        ("file", {}, True),
        ("file", {"realtime": True}, False),
        ("file", {"max_fps": 5}, False),
        ("shared", {}, False),
        ("folder", {}, True),
        ("folder", {"max_fps": 2}, False),
        ("mqtt", {}, False),
        ("serial", {}, False),
        ("replay", {}, True),
        ("replay", {"rate_hz": 100}, False),
    ],
)
def test_sources_say_whether_their_input_waits_for_the_pipeline(
    source_type: str, settings: dict[str, object], unpaced: bool
) -> None:
    fields, _ = CONFIGS[source_type]
    config = TypeAdapter(AnySource).validate_python({"type": source_type, **fields, **settings})
    assert config.unpaced is unpaced
