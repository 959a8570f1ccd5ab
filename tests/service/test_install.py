"""scripts/install.sh: a dry run changes nothing, a real run installs below DESTDIR and can be repeated."""

from __future__ import annotations

import grp
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "scripts" / "install.sh"
DEVICE_GROUPS = ("video", "render", "apex", "plugdev")


def install(*args: str, destdir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DESTDIR"}
    if destdir is not None:
        env["DESTDIR"] = str(destdir)
    return subprocess.run(["bash", str(INSTALL), *args], capture_output=True, text=True, env=env, timeout=300)


def actions(output: str) -> list[list[str]]:
    """The commands a dry run prints, split back into arguments."""
    return [shlex.split(line[2:]) for line in output.splitlines() if line.startswith("+ ")]


def existing_device_groups() -> list[str]:
    present = []
    for name in DEVICE_GROUPS:
        try:
            grp.getgrnam(name)
        except KeyError:
            continue
        present.append(name)
    return present


def exposure_of_installed_unit(root: Path) -> float:
    """systemd-analyze's score for the unit as installed below root, drop-ins included."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is missing: install systemd (`make test` does: apt-get install systemd)")
    command = [analyze, "security", "--offline=yes", "--no-pager", f"--root={root}", "edge-runtime.service"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.stderr.strip() == "", result.stderr  # every line of the unit and its drop-ins parsed
    match = re.search(r"Overall exposure level for edge-runtime\.service: (\d+\.\d+)", result.stdout)
    assert match, result.stdout
    return float(match.group(1))


def test_the_config_example_the_installer_copies_exists() -> None:
    assert (REPO / "config" / "config.example.yaml").is_file()


def test_dry_run_prints_every_action_and_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    result = install("--dry-run", "--extras", "openvino,litert", destdir=root)
    assert result.returncode == 0, result.stderr
    assert not root.exists()
    venv = f"{root}/opt/edge-runtime/venv"
    commands = actions(result.stdout)
    assert ["python3", "-m", "venv", venv] in commands
    pip = [c for c in commands if c[:4] == [f"{venv}/bin/python", "-m", "pip", "install"]]
    assert [c[-1] for c in pip] == [f"{REPO}[openvino,litert]", str(REPO)]
    assert "--force-reinstall" in pip[1] and "--no-deps" in pip[1]
    assert ["install", "-d", "-m", "0700", f"{root}/etc/edge-runtime/credentials"] in commands
    assert f"write {root}/etc/edge-runtime/config.yaml (mode 0644):" in result.stdout
    assert "    path: /opt/edge-runtime/share/samples/videos/astronaut.mp4" in result.stdout
    samples = f"{root}/opt/edge-runtime/share/samples"
    assert ["install", "-m", "0644", f"{REPO}/samples/videos/astronaut.mp4", f"{REPO}/samples/LICENSES.md",
            f"{samples}/videos/"] in commands  # fmt: skip
    unit = f"{root}/etc/systemd/system/edge-runtime.service"
    assert ["install", "-D", "-m", "0644", f"{REPO}/systemd/edge-runtime.service", unit] in commands
    assert f"write {unit}.d/10-device-groups.conf" in result.stdout
    assert "not reloading systemd" in result.stdout
    assert "systemctl enable --now edge-runtime" in result.stdout


def test_dry_run_without_destdir_targets_the_system_paths() -> None:
    result = install("--dry-run", "--extras", "onnx")
    assert result.returncode == 0, result.stderr
    commands = actions(result.stdout)
    assert any(c[-1] == "/etc/systemd/system/edge-runtime.service" for c in commands)
    assert any(c[-1] == f"{REPO}[onnx]" for c in commands)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--extras", "cuda,onnx"], "conflicts with onnx"),
        (["--extras", "all,cuda"], "conflicts with onnx and all"),
        (["--extras", "tensorflow"], "unknown extra 'tensorflow'"),
        (["--source", "/nonexistent/edge_runtime.whl"], "does not exist"),
        (["--python", "/nonexistent/python3"], "is not Python >= 3.10"),
        (["--frobnicate"], "unknown option: --frobnicate"),
    ],
)
def test_refuses_bad_arguments_with_a_reason(tmp_path: Path, args: list[str], message: str) -> None:
    result = install("--dry-run", *args, destdir=tmp_path)
    assert result.returncode == 1
    assert message in result.stderr


def test_device_groups_this_box_lacks_are_left_out(tmp_path: Path) -> None:
    """A group that does not exist would stop every start (216/GROUP), so the drop-in must omit it."""
    checkout = tmp_path / "checkout"
    for relative in ("scripts/install.sh", "systemd/edge-runtime.service", "config/config.example.yaml"):
        (checkout / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, checkout / relative)
    script = checkout / "scripts/install.sh"
    text = script.read_text()
    assert "DEVICE_GROUPS=(video render apex plugdev)\n" in text
    script.write_text(text.replace("DEVICE_GROUPS=(video render apex plugdev)", "DEVICE_GROUPS=(root no-such-group)"))
    result = subprocess.run(
        ["bash", str(script), "--dry-run", "--source", str(REPO)],
        capture_output=True,
        text=True,
        env={**os.environ, "DESTDIR": str(tmp_path / "root")},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "    SupplementaryGroups=root\n" in result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(REPO)]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    [built] = out.glob("edge_runtime-*.whl")
    return built


def test_install_below_destdir_and_reinstall(tmp_path: Path, wheel: Path) -> None:
    # --no-deps: the dependencies (numpy, OpenCV, ...) would come from an index; the layout is what is tested.
    first = install("--source", str(wheel), "--no-deps", "--extras", "openvino", destdir=tmp_path)
    assert first.returncode == 0, first.stderr
    venv = tmp_path / "opt/edge-runtime/venv"
    assert (venv / "bin/edge-runtime").is_file()
    imported = subprocess.run(
        [str(venv / "bin/python"), "-c", "from edge_runtime.service import SystemdNotifier; print('ok')"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert imported.stdout == "ok\n", imported.stderr

    etc = tmp_path / "etc/edge-runtime"
    assert stat.S_IMODE((etc / "credentials").stat().st_mode) == 0o700
    assert stat.S_IMODE((etc / "config.yaml").stat().st_mode) == 0o644
    example = (REPO / "config/config.example.yaml").read_text()
    installed = (etc / "config.yaml").read_text()
    assert installed == example.replace("../samples/", "/opt/edge-runtime/share/samples/")
    # The installed config runs as it is: what it names is installed, and check-config passes it.
    samples = tmp_path / "opt/edge-runtime/share/samples"
    assert (samples / "models/face_detection_short_range/model.yaml").is_file()
    assert (samples / "videos/astronaut.mp4").is_file() and (samples / "videos/LICENSES.md").is_file()
    staged = tmp_path / "staged-config.yaml"
    staged.write_text(installed.replace("/opt/edge-runtime/", f"{tmp_path}/opt/edge-runtime/"))
    check = subprocess.run(
        [sys.executable, "-m", "edge_runtime", "check-config", str(staged)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "EDGE_DEVICE_ID": "box-1"},
    )
    assert check.returncode == 0, check.stdout + check.stderr
    units = tmp_path / "etc/systemd/system"
    assert (units / "edge-runtime.service").read_bytes() == (REPO / "systemd/edge-runtime.service").read_bytes()
    drop_in = (units / "edge-runtime.service.d/10-device-groups.conf").read_text()
    groups = " ".join(existing_device_groups())
    assert drop_in.splitlines()[-2:] == ["SupplementaryGroups=", f"SupplementaryGroups={groups}"]
    assert exposure_of_installed_unit(tmp_path) <= 2.0

    (etc / "config.yaml").write_text("device_id: kept-by-reinstall\n")
    [notify] = venv.glob("lib/python*/site-packages/edge_runtime/service/notify.py")
    notify.write_text("raise ImportError('an older build')\n")
    second = install("--source", str(wheel), "--no-deps", "--extras", "openvino", destdir=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "Reusing the virtual environment" in second.stdout and "Keeping the existing" in second.stdout
    assert (etc / "config.yaml").read_text() == "device_id: kept-by-reinstall\n"
    assert notify.read_bytes() == (REPO / "edge_runtime/service/notify.py").read_bytes()  # same version, replaced
