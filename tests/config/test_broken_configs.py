"""Broken config files: each must be refused with the field at fault and a message saying what is wrong."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.config import ConfigFileError, load_config
from edge_runtime.errors import EdgeRuntimeError

DELETE = object()
SENSOR = {"type": "mqtt", "topics": ["sensors/a"], "window": {"length": 64, "stride": 32}}
ZONE = {"polygon": [[0.0, 0.5], [1.0, 0.5], [1.0, 1.0], [0.0, 1.0]]}
LINE = {"points": [[0.3, 0.6], [0.7, 0.6]], "inbound": "right"}


def edit(data: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """Apply {"pipelines.0.publish.qos": 3, "device_id": DELETE} to the base config."""
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        target: Any = data
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target.setdefault(key, {})
        if value is DELETE:
            del target[last]
        elif isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return data


CASES = [
    ({"device_id": DELETE}, "device_id", "required field is missing"),
    ({"mqqt": {"host": "broker"}}, "mqqt", "unknown field; did you mean 'mqtt'?"),
    ({"mqtt.hosts": ["a:1883", "b:99999"]}, "mqtt.hosts", "hosts[1]: 'b:99999' is not host, host:port"),
    ({"mqtt.hosts": ["a:1883", "a:1883"]}, "mqtt.hosts", "hosts[1]: 'a:1883' is named twice"),
    ({"mqtt.hosts": ["a"], "mqtt.host": "b"}, "mqtt", "either as hosts or as host and port, not both"),
    ({"pipelines.0.source.pth": "x.mp4"}, "pipelines[0].source.pth", "did you mean 'path'?"),
    ({"pipelines.0.source.type": "rtspp"}, "pipelines[0].source", "unknown source type 'rtspp'; expected one of"),
    ({"pipelines.0.source": {"path": "x.mp4"}}, "pipelines[0].source", "missing field 'type' (one of: v4l2, stream"),
    (
        {"pipelines.0.source": {"type": "stream", "url": "camera.local:554/live"}},
        "pipelines[0].source.url",
        "String should match pattern",
    ),
    (
        {"pipelines.0.source": SENSOR | {"window": {"length": 8, "stride": 10}}},
        "pipelines[0].source.window",
        "stride 10 is longer than the window (8)",
    ),
    ({"pipelines.0.source": {"type": "replay", "path": "a.csv"}}, "pipelines[0].source.window", "required"),
    ({"pipelines.0.publish.qos": 3}, "pipelines[0].publish.qos", "Input should be 0, 1 or 2"),
    ({"pipelines.0.publish.min_score": 1.5}, "pipelines[0].publish.min_score", "less than or equal to 1"),
    ({"pipelines.0.publish.snapshot.jpeg_quality": 0}, "pipelines[0].publish.snapshot.jpeg_quality", "greater than"),
    ({"pipelines": []}, "pipelines", "at least one pipeline is needed, or models to serve"),
    ({"pipelines": DELETE}, "pipelines", "at least one pipeline is needed, or models to serve"),
    ({"serve": {"http": {"host": "0.0.0.0"}, "models": [{"name": "m", "path": "m"}]}}, "serve.http", "needs a token"),
    ({"serve": {"models": [{"name": "a/b", "path": "m"}]}}, "serve.models[0].name", "cannot be an MQTT topic level"),
    (
        {"serve": {"http": {"host": "0.0.0.0", "token": ""}, "models": [{"name": "m", "path": "m"}]}},
        "serve.http.token",
        "is empty, which would let anyone in",
    ),
    (
        {"serve": {"http": {"host": "0.0.0.0", "token": "${EDGE_TEST_SURELY_UNSET:-}"}, "models": []}},
        "serve.http.token",
        "is empty, which would let anyone in",
    ),
    (
        {"serve": {"http": {"token": "hunter2"}, "models": [{"name": "m", "path": "m"}]}},
        "serve.http.token",
        "has 7 characters, fewer than the 16 a token needs not to be guessed",
    ),
    ({"serve": {"models": []}}, "serve.models", "at least 1 item"),
    ({"serve": {"share_group": "a/b", "models": []}}, "serve.share_group", "it contains '/'"),
    ({"serve": {"share_group": "all boxes", "models": []}}, "serve.share_group", "it contains ' '"),
    ({"serve": {"share_group": "g+", "models": []}}, "serve.share_group", "it contains '+'"),
    ({"serve": {"share_group": "$g", "models": []}}, "serve.share_group", "starts with '$', which brokers reserve"),
    ({"serve": {"share_group": "g$1", "models": []}}, "serve.share_group", "cannot be a share group: it contains '$'"),
    ({"serve": {"share_group": "", "models": []}}, "serve.share_group", "must not be empty"),
    (
        {"serve": {"share_group": "g", "mqtt": False, "models": [{"name": "m", "path": "m"}]}},
        "serve",
        "share_group takes the fleet's requests over MQTT, but mqtt is false",
    ),
    ({"device_id": "fleet"}, "device_id", "'fleet' is reserved: <prefix>/fleet/infer/<model>"),
    (
        {"serve": {"models": [{"name": "m", "path": "m", "batching": {"max_batch_size": 1000}}]}},
        "serve.models[0].batching.max_batch_size",
        "less than or equal to 256",
    ),
    ({"pipelines": "faces"}, "pipelines", "expected a list, found text"),
    ({"mqtt": None}, "mqtt", "expected a mapping of fields, found no value"),
    ({"device_id": 12}, "device_id", "found a number; put it in quotes"),
    ({"device_id": "${EDGE_TEST_SURELY_UNSET}"}, "device_id", "environment variable EDGE_TEST_SURELY_UNSET is not set"),
    ({"device_id": "box-${oops"}, "device_id", "write $${ for a literal ${"),
    ({"mqtt.password": "!credential mqtt-password"}, "mqtt.password", "credential mqtt-password not found in"),
    ({"mqtt.tls": {"cert_file": "client.crt"}}, "mqtt.tls", "cert_file and key_file must be given together"),
    ({"mqtt.tls": {"ca_file": "missing-ca.pem"}}, "mqtt.tls.ca_file", "file not found: "),
    ({"mqtt.port": 0}, "mqtt.port", "greater than 0"),
    ({"stats.interval_s": -5}, "stats.interval_s", "greater than 0"),
    ({"stats.prometheus.port": 70000}, "stats.prometheus.port", "less than 65536"),
    ({"stats.prometheus.enable": True}, "stats.prometheus.enable", "did you mean 'enabled'?"),
    ({"log_level": "verbose"}, "log_level", "'debug', 'info', 'warning' or 'error'"),
    ({"device_id": "site/box"}, "device_id", "cannot be an MQTT topic level: it contains '/'"),
    ({"device_id": "$SYS"}, "device_id", "starts with '$', which brokers reserve"),
    ({"pipelines.0.name": "front door"}, "pipelines[0].name", "it contains ' '"),
    ({"pipelines.0.name": "cam+1"}, "pipelines[0].name", "it contains '+'"),
    ({"pipelines.0.model.path": "no/such/model"}, "pipelines[0].model.path", "pipeline 'faces': model not found: "),
    (
        {"serve": {"models": [{"name": "m", "path": "no/such/model"}]}},
        "serve.models[0].path",
        "served model 'm': model not found: ",
    ),
    ({"pipelines.0.model.path": "config.yaml"}, "pipelines[0].model.path", "neither a model package directory"),
    ({"pipelines.0.model.variant": "onnx/int8"}, "pipelines[0].model.variant", "has no variant 'onnx/int8'"),
    ({"pipelines.0.model.variant": "int8"}, "pipelines[0].model.variant", "is not a variant id like 'openvino/int8'"),
    (
        {"pipelines.0.model.backend": "litert", "pipelines.0.model.variant": "openvino/fp32"},
        "pipelines[0].model",
        "backend litert cannot load openvino variants",
    ),
    ({"pipelines.0.model.backend": "tensorflow"}, "pipelines[0].model.backend", "'openvino', 'litert' or"),
    ({"pipelines.0.model.threads": 0}, "pipelines[0].model.threads", "greater than or equal to 1"),
    ({"pipelines.0.model.fidelity_tolerance": 2}, "pipelines[0].model.fidelity_tolerance", "less than or equal"),
    (
        {"pipelines.0.source": SENSOR, "pipelines.0.publish.snapshot.enabled": True},
        "pipelines[0]",
        "publish.snapshot needs a camera source; 'mqtt' gives sensor windows",
    ),
    (
        {"pipelines.0.source": SENSOR, "pipelines.0.track": {}},
        "pipelines[0]",
        "track needs a camera source; 'mqtt' gives sensor windows",
    ),
    (
        {"pipelines.0.track": {"filters": {"face": {"threshold": 2}}}},
        "pipelines[0].track.filters.face.threshold",
        "less than or equal to 1",
    ),
    ({"pipelines.0.zones": {"yard": ZONE}}, "pipelines[0].zones", "needs track: zones follow tracked objects"),
    (
        {"pipelines.0.lines": {"gate": LINE}, "pipelines.0.track": {"enabled": False}},
        "pipelines[0].lines",
        "needs track: lines follow tracked objects, and none are tracked (track.enabled is false)",
    ),
    ({"pipelines.0.events": {}}, "pipelines[0].events", "needs track: events follow tracked objects"),
    (
        {"pipelines.0.track": {"labels": ["face"]}, "pipelines.0.zones": {"yard": ZONE | {"labels": ["face", "car"]}}},
        "pipelines[0].zones.yard.labels[1]",
        "'car' is not tracked, so no object of it is ever seen (track.labels: face)",
    ),
    (
        {"pipelines.0.track": {"labels": ["face"]}, "pipelines.0.lines": {"gate": LINE | {"labels": ["car"]}}},
        "pipelines[0].lines.gate.labels[0]",
        "'car' is not tracked",
    ),
    (
        {"pipelines.0.track": {"labels": ["face"]}, "pipelines.0.events": {"labels": ["face", "person"]}},
        "pipelines[0].events.labels[1]",
        "'person' is not tracked",
    ),
    (
        {"pipelines.0.track": {}, "pipelines.0.zones": {"yard": ZONE}, "pipelines.0.events.required_zones": ["drive"]},
        "pipelines[0].events.required_zones[0]",
        "'drive' is not a zone of this pipeline (its zones: yard)",
    ),
    (
        {"pipelines.0.track": {}, "pipelines.0.events": {"required_zones": ["yard"]}},
        "pipelines[0].events.required_zones[0]",
        "'yard' is not a zone of this pipeline (it has none)",
    ),
    (
        {"pipelines.0.track": {}, "pipelines.0.zones": {"front yard": ZONE}},
        "pipelines[0].zones",
        "zone name 'front yard' cannot be an MQTT topic level: it contains ' '",
    ),
    (
        {"pipelines.0.track": {}, "pipelines.0.lines": {"gate/in": LINE}},
        "pipelines[0].lines",
        "line name 'gate/in' cannot be an MQTT topic level: it contains '/'",
    ),
    ({"pipelines.0.name": "n" * 65}, "pipelines[0].name", "is 65 characters long; at most 64 are allowed"),
    (
        {"pipelines.0.track": {}, "pipelines.0.zones": {"yard": {"polygon": [[0, 0], [1, 1.5], [0, 1]]}}},
        "pipelines[0].zones.yard.polygon",
        "the polygon has points outside the frame",
    ),
    (
        {"pipelines.0.track": {}, "pipelines.0.lines": {"gate": {"points": [[0, 0.5], [1, 0.5]]}}},
        "pipelines[0].lines.gate.inbound",
        "required field is missing",
    ),
    (
        {"pipelines.0.track": {}, "pipelines.0.events": {"heartbeat_s": 0}},
        "pipelines[0].events.heartbeat_s",
        "greater than 0",
    ),
    (
        {"pipelines.0.source": SENSOR, "pipelines.0.preprocess": {"resize": "crop"}},
        "pipelines[0]",
        "preprocess.resize applies to images",
    ),
    ({"pipelines.0.source": SENSOR}, "pipelines[0].source.type", "a sensor source cannot feed model"),
    ({"pipelines.0.decoder": {"name": "yolo_v99"}}, "pipelines[0].decoder", "unknown decoder 'yolo_v99'"),
    (
        {"pipelines.0.decoder": {"name": "ssd_anchors", "params": {"num_layer": 4}}},
        "pipelines[0].decoder",
        "decoder.params.num_layer: unknown field",
    ),
    ({"pipelines.0.preprocess": {"mean": [1, 2]}}, "pipelines[0].preprocess", "mean has 2 values but the input has 3"),
    ({"pipelines.0.preprocess": {"std": [0]}}, "pipelines[0].preprocess.std", "std must not contain zero"),
    (
        {"pipelines.0.preprocess": {"pad_value": [114, 114]}},
        "pipelines[0].preprocess",
        "pad_value has 2 values but the input has 3",
    ),
    (
        {"pipelines.0.source": SENSOR, "pipelines.0.preprocess": {"pad_value": 114}},
        "pipelines[0]",
        "preprocess.pad_value applies to images",
    ),
    (
        {"pipelines.0.source": {"type": "v4l2", "device": 1.5}},
        "pipelines[0].source.device",
        "valid string; or Input should be a valid integer",
    ),
]


@pytest.mark.parametrize(("changes", "field", "fragment"), CASES, ids=[c[1] + ":" + c[2][:30] for c in CASES])
def test_broken_config_names_field_and_problem(
    changes: dict[str, Any],
    field: str,
    fragment: str,
    base_config: dict[str, Any],
    write_config: Any,
    tmp_path: Path,
) -> None:
    path = write_config(edit(base_config, changes))
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    with pytest.raises(ConfigFileError) as raised:
        load_config(path, environ={"CREDENTIALS_DIRECTORY": str(credentials)})
    matching = [
        p for p in raised.value.problems if re.match(rf"{re.escape(str(path))}(:\d+)?: {re.escape(field)}: ", p)
    ]
    assert matching, f"no problem at {field}: {raised.value.problems}"
    assert any(fragment in p for p in matching), matching
    assert isinstance(raised.value, EdgeRuntimeError)


def test_duplicate_pipeline_names_name_both_indices(base_config: dict[str, Any], write_config: Any) -> None:
    second = {**base_config["pipelines"][0], "publish": {"qos": 0}}
    base_config["pipelines"] += [{**second, "name": "other"}, second]
    with pytest.raises(ConfigFileError) as raised:
        load_config(write_config(base_config), environ={})
    assert raised.value.problems == [
        f"{raised.value.file}:4: pipelines: pipeline name 'faces' is used by pipelines[0] and pipelines[2]; "
        "names must be unique"
    ]


def test_problems_carry_the_line_of_the_field(write_config: Any, face_package_dir: Path) -> None:
    text = f"""device_id: box-1
pipelines:
  - name: faces
    source:
      type: file
      path: a.mp4
      pth: b.mp4
    model:
      path: {face_package_dir}
    publish:
      qos: 3
"""
    path = write_config(text)
    with pytest.raises(ConfigFileError) as raised:
        load_config(path, environ={})
    assert raised.value.problems == [
        f"{path}:7: pipelines[0].source.pth: unknown field; did you mean 'path'?",
        f"{path}:11: pipelines[0].publish.qos: Input should be 0, 1 or 2",
    ]


def test_problems_of_zones_lines_and_events_carry_the_line_of_the_field_at_fault(
    base_config: dict[str, Any], write_config: Any, face_package_dir: Path
) -> None:
    text = f"""device_id: box-1
pipelines:
  - name: faces
    source: {{type: file, path: video.mp4}}
    model: {{path: {face_package_dir}}}
    track:
      labels: [face]
    zones:
      yard:
        polygon: [[0, 0.5], [1, 0.5], [1, 1]]
        labels:
          - face
          - car
    events:
      required_zones: [yard, drive]
"""
    path = write_config(text)
    with pytest.raises(ConfigFileError) as raised:
        load_config(path, environ={})
    assert raised.value.problems == [
        f"{path}:13: pipelines[0].zones.yard.labels[1]: 'car' is not tracked, so no object of it is ever seen "
        "(track.labels: face)",
        f"{path}:15: pipelines[0].events.required_zones[1]: 'drive' is not a zone of this pipeline (its zones: yard)",
    ]


def test_a_pipeline_that_follows_objects_loads_and_one_without_these_sections_does_not_follow_them(
    base_config: dict[str, Any], write_config: Any
) -> None:
    plain = load_config(write_config(base_config), environ={}).pipelines[0]
    assert (plain.zones, plain.lines, plain.events, plain.follows_objects) == ({}, {}, None, False)
    base_config["pipelines"][0] |= {
        "track": {"labels": ["face"]},
        "zones": {"yard": ZONE | {"labels": ["face"]}, "door": ZONE | {"loitering_s": 5}},
        "lines": {"gate": LINE},
        "events": {"required_zones": ["door"], "snapshot": {"crop": False}},
    }
    pipeline = load_config(write_config(base_config), environ={}).pipelines[0]
    assert list(pipeline.zones) == ["yard", "door"] and pipeline.zones["door"].loitering_s == 5
    assert pipeline.lines["gate"].inbound == "right" and pipeline.events is not None
    assert pipeline.events.required_zones == ["door"] and pipeline.follows_objects
    base_config["pipelines"][0]["events"] = {"enabled": False}
    del base_config["pipelines"][0]["zones"], base_config["pipelines"][0]["lines"]
    assert not load_config(write_config(base_config), environ={}).pipelines[0].follows_objects
    del base_config["pipelines"][0]["track"]  # events kept in the file but off need no track
    assert load_config(write_config(base_config), environ={}).pipelines[0].events is not None


def test_every_problem_is_reported_at_once(base_config: dict[str, Any], write_config: Any) -> None:
    changes = {"device_id": "a b", "stats.interval_s": 0, "pipelines.0.publish.qos": 5}
    with pytest.raises(ConfigFileError) as raised:
        load_config(write_config(edit(base_config, changes)), environ={})
    fields = [p.split(": ")[1] for p in raised.value.problems]
    assert fields == ["device_id", "stats.interval_s", "pipelines[0].publish.qos"]
    assert "(3 problems)" in str(raised.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("device_id: box\npipelines:\n  - name: a\n   source: {}\n", r":4: not valid YAML: .*column 4"),
        ("device_id: box\nmqtt: {host: [a, b}\n", r":2: not valid YAML: "),
        ("device_id: box\ndevice_id: other\n", r":2: device_id: duplicate key \(first given on line 1\)"),
        ("device_id: !secret box\npipelines: []\n", r":1: device_id: could not determine a constructor"),
        ("- device_id: box\n", r": \(top level\): expected a mapping of settings, found a list$"),
        ("# nothing yet\n", r": \(top level\): expected a mapping of settings, found an empty file$"),
        ("a: 1\n---\nb: 2\n", r":2: not valid YAML: but found another document"),
    ],
    ids=["indentation", "flow", "duplicate-key", "unknown-tag", "list", "empty", "two-documents"],
)
def test_files_that_are_not_a_yaml_mapping(text: str, expected: str, write_config: Any) -> None:
    path = write_config(text)
    with pytest.raises(ConfigFileError) as raised:
        load_config(path, environ={})
    assert any(re.search(re.escape(str(path)) + expected, p) for p in raised.value.problems), raised.value.problems


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError) as raised:
        load_config(tmp_path / "absent.yaml")
    assert raised.value.problems == [f"{tmp_path / 'absent.yaml'}: cannot read: No such file or directory"]
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigFileError, match="not a text file"):
        load_config(tmp_path / "binary.yaml")
