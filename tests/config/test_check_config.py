"""`edge-runtime check-config FILE`: ok with a summary, or every problem and status 2."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from edge_runtime.commands.check_config import run_check_config

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "config.example.yaml"


def test_a_valid_config_is_summarised(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EDGE_DEVICE_ID", raising=False)
    assert run_check_config(argparse.Namespace(file=EXAMPLE)) == 0
    out, err = capsys.readouterr()
    assert out == f"{EXAMPLE}: ok (2 pipelines: entrance-faces, pump-vibration (disabled))\n"
    assert err == ""


def test_problems_are_listed_with_status_2(
    base_config: dict[str, Any], write_config: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base_config["pipelines"][0]["publish"] = {"qos": 3, "min_score": 1.5}
    path = write_config(base_config)
    assert run_check_config(argparse.Namespace(file=path)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"{path}:12: pipelines[0].publish.qos: Input should be 0, 1 or 2",
        f"{path}:13: pipelines[0].publish.min_score: Input should be less than or equal to 1",
        f"{path}: 2 problems",
    ]


def test_a_missing_file_is_a_problem_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_check_config(argparse.Namespace(file=tmp_path / "nope.yaml")) == 2
    assert "nope.yaml: cannot read: No such file or directory" in capsys.readouterr().err


def test_a_share_group_that_is_no_topic_level_is_refused_with_its_field(
    base_config: dict[str, Any], write_config: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base_config["serve"] = {"share_group": "fleet/a", "models": []}
    path = write_config(base_config)
    assert run_check_config(argparse.Namespace(file=path)) == 2
    problems = capsys.readouterr().err.splitlines()
    assert any(
        p.startswith(f"{path}:") and ": serve.share_group: " in p and "it contains '/'" in p for p in problems
    ), problems


def test_a_serve_section_in_error_adds_no_pipeline_error(
    base_config: dict[str, Any], face_package_dir: Path, write_config: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A config of served models only, whose serve section has a mistake: that mistake is the one problem (every
    `serve:` error used to add "at least one pipeline is needed, or models to serve")."""
    del base_config["pipelines"]
    base_config["serve"] = {"http": {"host": "0.0.0.0"}, "models": [{"name": "faces", "path": str(face_package_dir)}]}
    path = write_config(base_config)
    assert run_check_config(argparse.Namespace(file=path)) == 2
    problems = capsys.readouterr().err.splitlines()
    assert len(problems) == 2 and problems[-1] == f"{path}: 1 problem", problems
    assert ": serve.http: serving on 0.0.0.0, off loopback, needs a token" in problems[0]


def test_a_config_with_neither_pipelines_nor_served_models_is_still_refused(
    base_config: dict[str, Any], write_config: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    del base_config["pipelines"]
    assert run_check_config(argparse.Namespace(file=write_config(base_config))) == 2
    assert ": pipelines: at least one pipeline is needed, or models to serve" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("serve_host", "prometheus_host", "clash"),
    [
        ("127.0.0.1", "127.0.0.1", True),
        ("localhost", "127.0.0.1", True),
        ("0.0.0.0", "127.0.0.1", True),
        ("127.0.0.1", "::", True),
        ("127.0.0.1", "127.0.0.2", False),
    ],
)
def test_the_inference_and_metrics_endpoints_on_one_port_are_refused_naming_both(
    base_config: dict[str, Any],
    face_package_dir: Path,
    write_config: Any,
    capsys: pytest.CaptureFixture[str],
    serve_host: str,
    prometheus_host: str,
    clash: bool,
) -> None:
    http = {"host": serve_host, "port": 9464, "token": "0123456789abcdef-serve"}
    base_config["serve"] = {"http": http, "models": [{"name": "faces", "path": str(face_package_dir)}]}
    base_config["stats"] = {"prometheus": {"enabled": True, "host": prometheus_host, "port": 9464}}
    path = write_config(base_config)
    assert run_check_config(argparse.Namespace(file=path)) == (2 if clash else 0)
    if clash:
        (problem, count) = capsys.readouterr().err.splitlines()
        assert re.match(
            rf"{re.escape(str(path))}:\d+: serve\.http\.port: port 9464 is also stats\.prometheus\.port", problem
        )
        assert count == f"{path}: 1 problem"
