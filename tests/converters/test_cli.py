"""`edge-convert` as users run it: exit status 2 and one line for bad input, a package and a summary otherwise."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from converters.cli import EXIT_BAD_INPUT, EXIT_NO_VARIANT, build_parser, main, options_from
from converters.errors import ConversionError
from converters.pipeline import convert
from edge_runtime.commands.help_text import shows_default
from edge_runtime.package.loader import open_package
from edge_runtime.package.signing import generate_keys, read_public_key, verify_package

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "converters.cli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=REPO, env=env, check=False)


def run_quiet(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Without progress lines, so stderr holds only what went wrong."""
    return run_cli(*args, "--quiet")


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("edge-convert: error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_unknown_extension(tmp_path: Path) -> None:
    path = tmp_path / "model.weights"
    path.write_bytes(b"\x00\x01")
    assert_one_line_error(run_quiet(path, "-o", tmp_path / "out"), "unknown model format .weights")


def test_pickle_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps({"layers": [1, 2, 3]}))
    result = run_quiet(path, "-o", tmp_path / "out")
    assert_one_line_error(result, "pickle", "arbitrary code", "torch.onnx.export")
    assert not (tmp_path / "out").exists()
    chatty = run_cli(path, "-o", tmp_path / "out")
    assert chatty.returncode == 2 and "Traceback" not in chatty.stderr
    assert chatty.stderr.strip().splitlines()[-1] == result.stderr.strip()


def test_empty_calibration_folder(tiny_onnx: Path, tmp_path: Path) -> None:
    (tmp_path / "calib").mkdir()
    result = run_quiet(tiny_onnx, "-o", tmp_path / "out", "--calibration", tmp_path / "calib")
    assert_one_line_error(result, str(tmp_path / "calib"), "holds no images")


def test_calibration_array_of_the_wrong_shape(tiny_onnx: Path, tmp_path: Path) -> None:
    np.save(tmp_path / "calib.npy", np.zeros((8, 32, 32, 3), np.float32))
    result = run_quiet(tiny_onnx, "-o", tmp_path / "out", "--calibration", tmp_path / "calib.npy")
    assert_one_line_error(result, str(tmp_path / "calib.npy"), "[8, 32, 32, 3]", "(N, 3, 32, 32)")


def test_unknown_variant_and_non_empty_output(tiny_onnx: Path, tmp_path: Path) -> None:
    assert_one_line_error(run_quiet(tiny_onnx, "-o", tmp_path / "a", "--variants", "onnx/int4"), "unknown variant")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("mine")
    assert_one_line_error(run_quiet(tiny_onnx, "-o", tmp_path / "b", "--variants", "onnx/fp32"), "--overwrite")
    assert (tmp_path / "b" / "keep.txt").read_text() == "mine"


def test_conversion_writes_a_package_and_warns_about_few_samples(
    tiny_onnx: Path, tiny_calibration: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = run_cli(
        tiny_onnx,
        "-o",
        out,
        "--calibration",
        tiny_calibration,
        "--variants",
        "onnx/fp32,onnx/int8",
        "--bench-seconds",
        "0.05",
        "--labels",
        ",".join(f"c{i}" for i in range(10)),
    )
    assert result.returncode == 0, result.stderr
    assert "fewer than 300" in result.stderr
    assert "onnx/int8" in result.stdout and f"package and report in {out}" in result.stdout
    assert set(open_package(out).manifest.variants) == {"onnx/fp32", "onnx/int8"}
    assert {"report.md", "report.json", "report.png", "model.yaml"} <= {p.name for p in out.iterdir()}


def test_flags_become_options(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "m.onnx",
            "-o",
            str(tmp_path),
            "--mean",
            "123.7,116.3,103.5",
            "--no-fast-bias-correction",
            "--ignored-scope",
            ".*head.*",
            "Softmax.*",
            "--variants",
            "openvino/int8, onnx/int8",
            "--preset",
            "mixed",
            "--full-range-weights",
        ]
    )
    options = options_from(args)
    assert options.settings.full_range_weights is True
    assert options_from(build_parser().parse_args(["m.onnx", "-o", str(tmp_path)])).settings.full_range_weights is False
    assert options.input_flags.mean == (123.7, 116.3, 103.5)
    assert options.settings.fast_bias_correction is False
    assert options.settings.ignored_scope == (".*head.*", "Softmax.*")
    assert options.settings.preset == "mixed"
    assert options.variants == ("openvino/int8", "onnx/int8")
    with pytest.raises(ConversionError, match="--max-drop"):
        options_from(build_parser().parse_args(["m.onnx", "-o", str(tmp_path), "--max-drop", "1.5"]))


def test_sign_needs_a_release_and_a_usable_key_before_converting(
    tiny_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main([str(tiny_onnx), "-o", str(out), "--sign", str(tmp_path / "ops.key"), "-q"]) == 2
    assert (
        capsys.readouterr().err
        == "edge-convert: error: --sign needs --release N, the package's release number (0 or more)\n"
    )
    assert main([str(tiny_onnx), "-o", str(out), "--sign", str(tmp_path / "ops.key"), "--release", "1", "-q"]) == 2
    assert capsys.readouterr().err.startswith(f"edge-convert: error: cannot read private key {tmp_path / 'ops.key'}")
    assert not out.exists()


def test_a_signed_conversion_verifies(tiny_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    private, public = generate_keys("ops", tmp_path / "keys")
    out = tmp_path / "out"
    args = [str(tiny_onnx), "-o", str(out), "--variants", "onnx/fp32", "--bench-seconds", "0", "-q"]
    assert main([*args, "--sign", str(private), "--release", "2", "--expires-in", "7d"]) == 0
    assert "signed as release 2, valid until " in capsys.readouterr().out
    signed = verify_package(out, [read_public_key(public)])
    assert signed.release == 2
    assert {"report.md", "report.json"} <= set(signed.unlisted)


def test_the_help_gives_examples_exit_statuses_and_every_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapped lines
    parser = build_parser()
    text = " ".join(parser.format_help().split())
    assert parser.epilog is not None and parser.epilog.startswith("examples:\n  edge-convert ")
    statuses = [int(s) for s in re.findall(r"^  (\d+) ", parser.epilog, re.MULTILINE)]
    assert statuses == [0, EXIT_NO_VARIANT, EXIT_BAD_INPUT, 130]
    for action in parser._actions:
        assert action.help, action.dest
        if shows_default(action):
            assert "default" not in action.help, action.dest
            assert f"(default: {action.default})" in text, action.dest
    assert "--subset-size N calibration samples to use (default: 300)" in text


@pytest.mark.parametrize(
    ("flag", "expected"), [([], True), (["--fast-bias-correction"], True), (["--no-fast-bias-correction"], False)]
)
def test_fast_bias_correction_is_on_unless_turned_off(tmp_path: Path, flag: list[str], expected: bool) -> None:
    args = build_parser().parse_args(["model.onnx", "-o", str(tmp_path), *flag])
    assert options_from(args).settings.fast_bias_correction is expected


def test_quick_builds_each_formats_fp32_and_int8_without_recovery(
    tiny_onnx: Path, tiny_calibration: Path, tmp_path: Path
) -> None:
    quick = options_from(build_parser().parse_args(["m.onnx", "-o", str(tmp_path), "--quick"]))
    assert quick.quick and not quick.recover and quick.bench_seconds == 0.5
    labels = ",".join(f"c{i}" for i in range(10))
    args = [str(tiny_onnx), "-o", str(tmp_path / "out"), "--calibration", str(tiny_calibration), "--labels", labels]
    options = options_from(build_parser().parse_args([*args, "--quick", "--bench-seconds", "0.05"]))
    assert options.bench_seconds == 0.05  # never longer than asked
    report = convert(options)
    built = [r.variant_id for r in report.variants]
    assert built == ["openvino/fp32", "openvino/int8", "onnx/fp32", "onnx/int8"]
    assert all(r.status == "ok" and r.speed is not None and r.attempts == [] for r in report.variants)
