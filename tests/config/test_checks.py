"""Each thing `run` refuses in a config that the schema accepts: `check-config` names it with its field and line,
and `run` exits 2 with the very same line before starting anything."""

from __future__ import annotations

import argparse
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from model_builders import build_window_mean_onnx

from edge_runtime.commands.check_config import run_check_config
from edge_runtime.package.signing import generate_keys

SENSOR_WINDOW = {"length": 64, "stride": 32}
Edit = Callable[[dict[str, Any], Path], None]


def source(**fields: Any) -> Edit:
    def edit(config: dict[str, Any], etc: Path) -> None:
        config["pipelines"][0]["source"] = fields

    return edit


def sensor_pipeline(**fields: Any) -> Edit:
    """The source, with a model that reads its windows."""

    def edit(config: dict[str, Any], etc: Path) -> None:
        etc.mkdir(parents=True, exist_ok=True)
        model = build_window_mean_onnx(etc / "window_mean.onnx", SENSOR_WINDOW["length"], 1)
        config["pipelines"][0]["source"] = fields
        config["pipelines"][0]["model"] = {"path": str(model)}

    return edit


def undecodable_video(config: dict[str, Any], etc: Path) -> None:
    (etc / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(2000))
    config["pipelines"][0]["source"]["path"] = "broken.mp4"


def package_copy(etc: Path, face_package_dir: Path) -> Path:
    return Path(shutil.copytree(face_package_dir, etc / "face"))


def corrupt_model_file(face_package_dir: Path) -> Edit:
    def edit(config: dict[str, Any], etc: Path) -> None:
        model = package_copy(etc, face_package_dir) / "tflite" / "fp32" / "model.tflite"
        model.write_bytes(model.read_bytes()[:-100])
        config["pipelines"][0]["model"]["path"] = "face"

    return edit


def missing_model_file(face_package_dir: Path) -> Edit:
    def edit(config: dict[str, Any], etc: Path) -> None:
        (package_copy(etc, face_package_dir) / "openvino" / "fp32" / "model.bin").unlink()
        config["pipelines"][0]["model"]["path"] = "face"

    return edit


def under_a_file(*keys: str, leaf: str = "state") -> Edit:
    def edit(config: dict[str, Any], etc: Path) -> None:
        (etc / "a-file").write_text("not a directory\n")
        target = config
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = f"a-file/{leaf}"

    return edit


def served(path: str, **http: Any) -> Edit:
    def edit(config: dict[str, Any], etc: Path) -> None:
        config["serve"] = {"http": http, "models": [{"name": "faces", "path": path}]}

    return edit


def ports_clash(face_package_dir: Path) -> Edit:
    def edit(config: dict[str, Any], etc: Path) -> None:
        served(str(face_package_dir), port=9464)(config, etc)
        config["stats"] = {"prometheus": {"enabled": True, "port": 9464}}

    return edit


def set_value(*keys: str | int, value: Any) -> Edit:
    def edit(config: dict[str, Any], etc: Path) -> None:
        target: Any = config
        for key in keys[:-1]:
            target = target[key] if isinstance(key, int) else target.setdefault(key, {})
        target[keys[-1]] = value

    return edit


LOWER_HALF = [[0.0, 0.5], [1.0, 0.5], [1.0, 1.0], [0.0, 1.0]]


def following(**sections: Any) -> Edit:
    """Every label tracked, with these zones, lines or events sections."""

    def edit(config: dict[str, Any], etc: Path) -> None:
        config["pipelines"][0].update({"track": {}, **sections})

    return edit


def tracking(decoder: dict[str, Any] | None = None, **track: Any) -> Edit:
    """A `track` section with these keys, and the decoder override where given."""

    def edit(config: dict[str, Any], etc: Path) -> None:
        config["pipelines"][0]["track"] = track
        if decoder is not None:
            config["pipelines"][0]["decoder"] = decoder

    return edit


def unlabelled_model_tracking(face_package_dir: Path, **track: Any) -> Edit:
    """The face detector with its manifest's labels taken out, tracked with these keys."""

    def edit(config: dict[str, Any], etc: Path) -> None:
        manifest = package_copy(etc, face_package_dir) / "model.yaml"
        manifest.write_text(manifest.read_text().replace("labels: [face]\n", ""))
        config["pipelines"][0]["model"]["path"] = "face"
        tracking(**track)(config, etc)

    return edit


def cases(face_package_dir: Path) -> list[tuple[str, Edit, str, str]]:
    """(id, how the valid base config is broken, the field named, a fragment of the message)."""
    return [
        ("video-missing", source(type="file", path="gone.mp4"), "pipelines[0].source.path", "does not exist"),
        ("video-undecodable", undecodable_video, "pipelines[0].source.path", "cannot be decoded"),
        ("folder-missing", source(type="folder", path="frames"), "pipelines[0].source.path", "image folder"),
        (
            "replay-missing",
            source(type="replay", path="readings.csv", window=SENSOR_WINDOW),
            "pipelines[0].source.path",
            "replay file",
        ),
        (
            "model-missing",
            set_value("pipelines", 0, "model", "path", value="models/none"),
            "pipelines[0].model.path",
            "model not found",
        ),
        ("model-corrupt", corrupt_model_file(face_package_dir), "pipelines[0].model.path", "the manifest says"),
        ("model-file-gone", missing_model_file(face_package_dir), "pipelines[0].model.path", "model.bin is missing"),
        (
            "variant-unknown",
            set_value("pipelines", 0, "model", "variant", value="onnx/int8"),
            "pipelines[0].model.variant",
            "has no variant 'onnx/int8'",
        ),
        (
            "track-without-detections",
            tracking(decoder={"name": "classification"}),
            "pipelines[0].track",
            "tracking needs detections; model face_detection_short_range is a detection model whose decoder "
            "classification gives classification results",
        ),
        (
            "track-label-unknown",
            tracking(labels=["face", "person"]),
            "pipelines[0].track.labels[1]",
            "model face_detection_short_range has no label 'person'; its labels: face",
        ),
        (
            "track-label-unlabelled-model",
            unlabelled_model_tracking(face_package_dir, labels=["0", "face"]),
            "pipelines[0].track.labels[1]",
            "lists no labels, so its detections are labelled by class number ('0', '1', ...), not 'face'",
        ),
        (
            "track-filter-unknown",
            tracking(filters={"default": {"threshold": 0.8}, "person": {"min_area": 0.01}}),
            "pipelines[0].track.filters.person",
            "has no label 'person'; its labels: face",
        ),
        (
            "zone-label-unknown",
            following(zones={"yard": {"polygon": LOWER_HALF, "labels": ["face", "car"]}}),
            "pipelines[0].zones.yard.labels[1]",
            "model face_detection_short_range has no label 'car'; its labels: face",
        ),
        (
            "line-label-unknown",
            following(lines={"gate": {"points": [[0.3, 0.6], [0.7, 0.6]], "inbound": "right", "labels": ["car"]}}),
            "pipelines[0].lines.gate.labels[0]",
            "model face_detection_short_range has no label 'car'; its labels: face",
        ),
        (
            "event-label-unknown",
            following(events={"labels": ["person"]}),
            "pipelines[0].events.labels[0]",
            "model face_detection_short_range has no label 'person'; its labels: face",
        ),
        ("served-missing", served("models/none"), "serve.models[0].path", "served model 'faces': model not found"),
        ("ports-clash", ports_clash(face_package_dir), "serve.http.port", "port 9464 is also stats.prometheus.port"),
        (
            "https-cert-missing",
            served(str(face_package_dir), tls_cert_file="cert.pem", tls_key_file="key.pem"),
            "serve.http.tls_cert_file",
            "file not found",
        ),
        ("state-dir", under_a_file("state_dir"), "state_dir", "a-file is not a directory"),
        ("cache-dir", under_a_file("cache_dir"), "cache_dir", "a-file is not a directory"),
        ("spool", under_a_file("mqtt", "spool", "path", leaf="spool.sqlite"), "mqtt.spool.path", "is not a directory"),
        ("tls-ca-missing", set_value("mqtt", "tls", value={"ca_file": "ca.pem"}), "mqtt.tls.ca_file", "file not found"),
        ("trust-key-missing", set_value("trust", "keys", value=["ops.pub"]), "trust.keys[0]", "ops.pub"),
    ]


CASE_IDS = [case[0] for case in cases(Path())]


@pytest.fixture
def config(base_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """A config `run` would start, with its state and cache under the test's folder."""
    return base_config | {"state_dir": str(tmp_path / "state"), "cache_dir": str(tmp_path / "cache")}


def check_config(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    status = run_check_config(argparse.Namespace(file=path))
    return status, capsys.readouterr().err.splitlines()


def test_the_base_config_passes(config: dict[str, Any], write_config: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(config)
    assert check_config(path, capsys) == (0, [])


@pytest.mark.parametrize("case", CASE_IDS)
def test_check_config_names_what_run_refuses_and_run_refuses_it_with_the_same_line(
    case: str,
    config: dict[str, Any],
    write_config: Any,
    edge_runtime: Any,
    face_package_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    [(_, edit, field, fragment)] = [c for c in cases(face_package_dir) if c[0] == case]
    edit(config, tmp_path / "etc")
    path = write_config(config)
    status, lines = check_config(path, capsys)
    assert status == 2, lines
    pattern = re.compile(rf"{re.escape(str(path))}:(\d+): {re.escape(field)}: .*{re.escape(fragment)}")
    matching = [line for line in lines if pattern.match(line)]
    assert len(matching) == 1, lines
    number = int(pattern.match(matching[0]).group(1))  # type: ignore[union-attr]
    written = f"{field.rsplit('.', 1)[-1]}:" if not field.endswith("]") else "- "  # the key, or the list entry
    assert path.read_text().splitlines()[number - 1].lstrip().startswith(written), (number, path.read_text())

    run = edge_runtime("run", "--config", path)
    assert run.returncode == 2, run.stderr
    assert f"  {matching[0]}" in run.stderr.splitlines(), run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "state" / "spool.sqlite").exists()  # refused before anything started


@pytest.mark.parametrize(
    ("edit", "field", "said"),
    [
        (
            source(type="v4l2", device="/dev/video-edge-runtime-test"),
            "pipelines[0].source.device",
            "video device /dev/video-edge-runtime-test does not exist now (is the camera plugged in?)",
        ),
        (
            sensor_pipeline(type="serial", port="/dev/ttyUSB-edge-runtime-test", window=SENSOR_WINDOW),
            "pipelines[0].source.port",
            "serial port /dev/ttyUSB-edge-runtime-test does not exist now (is the device plugged in?)",
        ),
    ],
    ids=["v4l2", "serial"],
)
def test_a_device_not_plugged_in_is_a_warning_not_a_refusal(
    edit: Edit,
    field: str,
    said: str,
    config: dict[str, Any],
    write_config: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A USB camera unplugged at boot must not keep the box's other pipelines from starting; its own
    pipeline retries until it is there."""
    edit(config, tmp_path / "etc")
    path = write_config(config)
    status, lines = check_config(path, capsys)
    assert (status, lines) == (0, []), lines
    pattern = re.compile(rf"{re.escape(str(path))}:\d+: {re.escape(field)}: {re.escape(said)}; the pipeline starts")
    assert [r for r in caplog.records if r.levelname == "WARNING" and pattern.match(r.getMessage())], caplog.text


def test_several_problems_of_different_kinds_are_reported_in_one_run(
    config: dict[str, Any], write_config: Any, edge_runtime: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A schema error does not hide the rest: a pipeline whose publish settings are wrong still has its video
    checked, and every other section its files, ports and directories."""
    etc = tmp_path / "etc"
    first = config["pipelines"][0]
    first["publish"] = {"qos": 3}  # schema
    first["source"]["path"] = "gone.mp4"  # a missing file in the same, invalid pipeline
    config["pipelines"].append(
        {
            "name": "door",
            "source": {"type": "v4l2", "device": "/dev/video-edge-runtime-test"},
            "model": {"path": "nope"},
        }
    )
    config["mqqt"] = {"host": "broker"}  # schema: an unknown section
    ports_clash(Path(first["model"]["path"]))(config, etc)
    under_a_file("state_dir")(config, etc)
    path = write_config(config)
    status, lines = check_config(path, capsys)
    assert status == 2
    expected = [
        ("pipelines[0].publish.qos", "Input should be 0, 1 or 2"),
        ("mqqt", "did you mean 'mqtt'?"),
        ("pipelines[0].source.path", "gone.mp4 does not exist"),
        ("pipelines[1].model.path", "pipeline 'door': model not found"),
        ("serve.http.port", "is also stats.prometheus.port"),
        ("state_dir", "a-file is not a directory"),
    ]
    for field, fragment in expected:
        assert any(
            re.match(rf"{re.escape(str(path))}:\d+: {re.escape(field)}: .*{re.escape(fragment)}", line)
            for line in lines
        ), (field, lines)
    assert lines[-1] == f"{path}: {len(expected)} problems", lines

    run = edge_runtime("run", "--config", path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert [f"  {line}" for line in lines[:-1]] == run.stderr.splitlines()[1:], run.stderr


def test_pipelines_run_would_not_start_are_not_checked(
    config: dict[str, Any], write_config: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camera = {"type": "v4l2", "device": "/dev/video-edge-runtime-test"}
    config["pipelines"] += [
        {"name": "later", "enabled": False, "source": camera, "model": {"path": "not-deployed"}},
        {"name": "unplugged", "source": camera, "model": {"path": "not-deployed-either"}},
    ]
    path = write_config(config)
    assert check_config(path, capsys)[0] == 2  # 'unplugged' is enabled in the file
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "pipelines-disabled.json").write_text('["unplugged"]')  # an operator's `pipeline disable`
    assert check_config(path, capsys) == (0, [])


def test_a_track_section_naming_the_model_s_labels_passes_and_a_disabled_one_is_not_checked(
    config: dict[str, Any], write_config: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config["pipelines"][0]["track"] = {"labels": ["face"], "filters": {"face": {"threshold": 0.8}}}
    assert check_config(write_config(config), capsys) == (0, [])
    config["pipelines"][0]["track"] = {"enabled": False, "labels": ["person"]}
    assert check_config(write_config(config), capsys) == (0, [])


def test_zones_lines_and_events_naming_the_model_s_labels_pass_and_disabled_events_are_not_checked(
    config: dict[str, Any], write_config: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config["pipelines"][0] |= {
        "track": {},
        "zones": {"yard": {"polygon": LOWER_HALF, "labels": ["face"]}},
        "lines": {"gate": {"points": [[0.3, 0.6], [0.7, 0.6]], "inbound": "left", "labels": ["face"]}},
        "events": {"labels": ["face"], "required_zones": ["yard"]},
    }
    assert check_config(write_config(config), capsys) == (0, [])
    config["pipelines"][0]["events"] = {"enabled": False, "labels": ["person"]}
    assert check_config(write_config(config), capsys) == (0, [])


def test_a_signed_box_checks_the_files_by_the_signature(
    config: dict[str, Any],
    write_config: Any,
    face_package_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Where signatures are required, the signature check covers every file: one problem, not two."""
    etc = tmp_path / "etc"
    missing_model_file(face_package_dir)(config, etc)
    generate_keys("ops", etc)
    config["trust"] = {"keys": ["ops.pub"]}
    path = write_config(config)
    status, lines = check_config(path, capsys)
    assert status == 2 and len(lines) == 2, lines
    assert "pipelines[0].model.path: pipeline 'faces': package" in lines[0] and "unsigned" in lines[0]


def test_a_serve_section_with_a_schema_error_still_has_its_models_checked(
    config: dict[str, Any], write_config: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config["serve"] = {"share_group": "a/b", "models": [{"name": "faces", "path": "models/none"}]}
    path = write_config(config)
    status, lines = check_config(path, capsys)
    assert status == 2
    assert [line.split(": ")[1] for line in lines[:-1]] == ["serve.share_group", "serve.models[0].path"], lines
