"""The command line as users run it: a real process, real backends, output read back."""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edge_runtime.cli import build_parser
from edge_runtime.commands.help_text import commands_of, shows_default
from edge_runtime.service.daemon import EXIT_UNDELIVERED

REPO = Path(__file__).resolve().parents[1]
FIXTURE_BOXES = Path(__file__).parent / "fixtures" / "boxes"


def edge_runtime(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "edge_runtime", *args, "--state-dir", str(state)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)


def test_probe_json_reports_box_profile_and_choices(face_package_dir: Path, tmp_path: Path) -> None:
    result = edge_runtime("probe", "--json", "--model", str(face_package_dir), state=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["hardware"]["cpu"]["logical_cores"] >= 1
    assert report["hardware"]["libraries"]["openvino"]["available"] is True
    assert report["profile"]["profile"] in ("generic-x86-cpu", "generic-arm-cpu")
    chosen = report["selection"]["candidates"][report["selection"]["chosen"]]
    assert chosen["status"] == "taken" and chosen["variant"] in ("openvino/fp32", "tflite/fp32")
    skipped = [c for c in report["selection"]["candidates"] if c["status"] == "skipped"]
    assert all(c["reason"].startswith("skipped: ") for c in skipped)


def test_probe_of_a_fixture_box_explains_the_missing_npu(face_package_dir: Path, tmp_path: Path) -> None:
    root = FIXTURE_BOXES / "intel-nuc-core-ultra"
    result = edge_runtime("probe", "--root", str(root), "--model", str(face_package_dir), state=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Profile: intel-core-ultra-npu" in result.stdout
    assert "openvino NPU fp16" in result.stdout and "OpenVINO does not list device NPU" in result.stdout
    assert "/dev/accel/accel0" in result.stdout
    assert "int8       x86_64 avx2 avx_vnni: int8 products accumulate in 32 bits" in result.stdout


def test_bench_json_measures_and_compares(face_package_dir: Path, tmp_path: Path) -> None:
    args = ["bench", str(face_package_dir), "--backend", "litert", "--seconds", "0.3", "--compare", "--json"]
    result = edge_runtime(*args, state=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    [row] = report["results"]
    assert row["backend"] == "litert" and row["variant"] == "tflite/fp32" and row["precision"] == "fp32"
    latency = row["latency"]
    assert 0 < latency["median_ms"] <= latency["p90_ms"] <= latency["p99_ms"]
    assert row["throughput"]["throughput_fps"] > 0
    assert row["fidelity"]["passed"] is True
    assert row["fidelity"]["outputs"][0]["max_abs_error"] < 1e-3
    assert "measuring latency" in result.stderr  # progress indication


def test_bench_select_stores_a_choice_that_probe_then_takes(tmp_path: Path) -> None:
    package = REPO / "samples" / "models" / "pose_detection"
    result = edge_runtime("bench", str(package), "--select", "--seconds", "0.3", "--json", state=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    by_choice = {(r["choice"], r["variant"]): r for r in report["results"]}
    assert ("litert CPU+xnnpack", "tflite/fp32") in by_choice and ("openvino CPU", "tflite/fp32") in by_choice
    for row in report["results"]:
        assert row["error"] is None and row["fidelity"] is not None
    bf16 = by_choice.get(("openvino CPU bf16", "tflite/fp32"))
    if bf16 is not None:  # only on CPUs with BF16: outside the default tolerance, so never selected
        assert bf16["fidelity"]["passed"] is False
    selected = report["selected"]
    assert selected is not None and selected["fidelity"]["passed"] is True
    assert json.loads((tmp_path / "selections.json").read_text())["models"]

    probe = edge_runtime("probe", "--json", "--model", str(package), state=tmp_path)
    chosen = json.loads(probe.stdout)["selection"]
    taken = chosen["candidates"][chosen["chosen"]]
    assert taken["origin"] == "stored"
    assert (taken["backend"], taken["variant"]) == (selected["backend"], selected["variant"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bench", "no/such/model"], "model not found: no/such/model"),
        (["bench", "README.md"], "is neither a model package directory nor a model file"),
        (
            ["bench", "samples/models/face_detection_short_range", "--backend", "tensorflow"],
            "invalid choice: 'tensorflow'",
        ),
        (["bench", "samples/models/face_detection_short_range", "--variant", "onnx/int8"], "nothing can run"),
    ],
)
def test_bad_input_is_one_clear_line_and_status_2(args: list[str], message: str, tmp_path: Path) -> None:
    result = edge_runtime(*args, state=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_corrupt_package_is_refused_with_its_file(face_package_dir: Path, tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    shutil.copytree(face_package_dir, package)
    (package / "tflite/fp32/model.tflite").write_bytes(b"not a model")
    result = edge_runtime("bench", str(package), "--backend", "litert", "--seconds", "0.2", state=tmp_path)
    assert result.returncode == 1
    assert "model.tflite has sha256" in result.stdout and "refusing to load it" in result.stdout


def test_importing_the_package_and_cli_loads_no_backend_library() -> None:
    code = (
        "import sys, edge_runtime, edge_runtime.cli, edge_runtime.placement.loading, edge_runtime.commands.bench;"
        "print([m for m in ('openvino', 'onnxruntime', 'ai_edge_litert', 'tflite_runtime') if m in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def commands() -> list[tuple[str, argparse.ArgumentParser]]:
    return [(" ".join(names), parser) for names, parser in commands_of(build_parser())]


def full_help(parser: argparse.ArgumentParser, monkeypatch: pytest.MonkeyPatch) -> str:
    """The help on a terminal wide enough that no line wraps, with its spaces made single."""
    monkeypatch.setenv("COLUMNS", "1000")
    return " ".join(parser.format_help().split())


def test_run_the_main_command_is_listed_first(monkeypatch: pytest.MonkeyPatch) -> None:
    [subcommands] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert next(iter(subcommands.choices)) == "run"
    assert full_help(build_parser(), monkeypatch).index(" run run the daemon") < full_help(
        build_parser(), monkeypatch
    ).index(" probe ")


@pytest.mark.parametrize(("name", "parser"), commands())
def test_every_command_says_what_it_does_with_examples_and_exit_statuses(
    name: str, parser: argparse.ArgumentParser
) -> None:
    assert parser.description and "\n" not in parser.description
    assert parser.epilog is not None
    examples, statuses = parser.epilog.split("\n\nexit status:\n")
    assert examples.startswith("examples:\n  edge-runtime ")
    assert re.match(r"  0   \S", statuses)
    assert all(re.match(r"(  \d+ +|      )\S", line) for line in statuses.splitlines())


@pytest.mark.parametrize(("name", "parser"), commands())
def test_every_option_has_help_and_shows_its_default_once(
    name: str, parser: argparse.ArgumentParser, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = full_help(parser, monkeypatch)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        assert action.help, (name, action.dest)
        if shows_default(action):
            assert "default" not in action.help, (name, action.dest)
            assert f"(default: {action.default})" in text, (name, action.dest)


def test_the_run_command_gives_its_real_exit_statuses(monkeypatch: pytest.MonkeyPatch) -> None:
    [run] = [parser for name, parser in commands() if name == "edge-runtime run"]
    assert run.epilog is not None
    statuses = [int(s) for s in re.findall(r"^  (\d+) ", run.epilog, re.MULTILINE)]
    assert statuses == [0, 2, EXIT_UNDELIVERED]
    assert "--config FILE the config file (default: /etc/edge-runtime/config.yaml)" in full_help(run, monkeypatch)


@pytest.mark.parametrize(
    ("args", "level"),
    [
        (["probe"], None),
        (["-v", "probe"], logging.INFO),
        (["probe", "-v"], logging.INFO),
        (["-q", "run"], logging.WARNING),
        (["run", "--quiet"], logging.WARNING),
        (["--verbose", "keys", "new", "ops"], logging.INFO),
        (["keys", "new", "ops", "-v"], logging.INFO),
        (["fleet", "--key", "ops.key", "-q", "status"], logging.WARNING),
        (["fleet", "--key", "ops.key", "status", "-q"], logging.WARNING),
        (["-v", "check-config", "config.yaml", "-q"], logging.WARNING),
    ],
)
def test_verbose_and_quiet_are_taken_before_and_after_the_command(args: list[str], level: int | None) -> None:
    assert build_parser().parse_args(args).log_level == level


def test_verbose_and_quiet_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_status:
        build_parser().parse_args(["probe", "-v", "-q"])
    assert exit_status.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
