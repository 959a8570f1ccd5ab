"""The systemd unit: hardened (measured by systemd-analyze), valid, and consistent with the installer."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edge_runtime.config.serving import HttpSettings

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "edge-runtime.service"
INSTALLED_BINARY = "/opt/edge-runtime/venv/bin/edge-runtime"
MAX_EXPOSURE = 2.0


def systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.fail("systemd-analyze is missing: install systemd (`make test` does: apt-get install systemd)")
    return path


def service_settings() -> dict[str, list[str]]:
    """[Service] keys with every value each is given (units repeat keys such as DeviceAllow=)."""
    settings: dict[str, list[str]] = {}
    section = ""
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_security_exposure_is_at_most_two() -> None:
    result = subprocess.run(
        [systemd_analyze(), "security", "--offline=yes", "--no-pager", str(UNIT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = re.search(r"Overall exposure level for edge-runtime\.service: (\d+\.\d+)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= MAX_EXPOSURE, result.stdout
    assert result.stderr.strip() == "", f"systemd-analyze ignored settings: {result.stderr}"


def test_unit_verifies_except_for_the_binary_only_an_install_provides() -> None:
    result = subprocess.run(
        [systemd_analyze(), "verify", "--man=no", str(UNIT)], capture_output=True, text=True, timeout=60
    )
    complaints = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert complaints == [
        f"edge-runtime.service: Command {INSTALLED_BINARY} is not executable: No such file or directory"
    ]


def test_unit_is_a_watched_notify_service_started_from_the_installed_venv() -> None:
    settings = service_settings()
    assert settings["Type"] == ["notify"] and settings["NotifyAccess"] == ["main"]
    assert settings["WatchdogSec"] == ["30"] and settings["Restart"] == ["on-failure"]
    # run exits 2 on a config it refuses (tests/service/test_daemon.py): retrying cannot fix that
    assert settings["RestartPreventExitStatus"] == ["2"]
    assert settings["ExecStart"] == [f"{INSTALLED_BINARY} run --config /etc/edge-runtime/config.yaml"]
    assert settings["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    nofile = int(settings["LimitNOFILE"][0])
    assert nofile >= 4 * HttpSettings().max_connections, "an HTTP connection flood must not take every descriptor"
    installer = (REPO / "scripts" / "install.sh").read_text()
    assert "PREFIX=/opt/edge-runtime\n" in installer and "CONFIG_DIR=/etc/edge-runtime\n" in installer


def test_accelerators_are_reachable_and_nothing_else() -> None:
    settings = service_settings()
    assert settings["DevicePolicy"] == ["closed"]
    allowed = {entry.split()[0] for entry in settings["DeviceAllow"]}
    for group in ("char-video4linux", "char-drm", "char-accel", "char-apex", "char-usb_device", "char-nvidia*"):
        assert group in allowed
    assert "PrivateDevices" not in settings  # it would hide every accelerator


def test_credentials_are_optional_files_in_the_config_directory() -> None:
    settings = service_settings()
    loaded = dict(entry.split(":", 1) for entry in settings["LoadCredential"])
    defaults = {entry.split(":", 1)[0] for entry in settings["SetCredential"]}
    assert loaded == {name: f"/etc/edge-runtime/credentials/{name}" for name in loaded}
    assert {"mqtt-password", "mqtt-client.key"} <= set(loaded)
    assert defaults == set(loaded)  # a missing file must not stop the service from starting


def test_write_execute_memory_stays_allowed_because_openvino_needs_it(tiny_openvino: Path) -> None:
    """What the unit's comment on MemoryDenyWriteExecute= claims, measured with the kernel's own switch."""
    assert "MemoryDenyWriteExecute" not in service_settings()
    libc = ctypes.CDLL(None, use_errno=True)
    pr_get_memory_mdwe = 66
    if libc.prctl(pr_get_memory_mdwe, 0, 0, 0, 0) < 0:
        pytest.skip("kernel older than 6.3: no PR_SET_MDWE to measure with")
    script = (
        "import ctypes, openvino\n"
        "assert ctypes.CDLL(None).prctl(65, 1, 0, 0, 0) == 0\n"  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN
        f"openvino.Core().compile_model({str(tiny_openvino)!r}, 'CPU')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "can't protect" in result.stderr, result.stderr[-2000:]
