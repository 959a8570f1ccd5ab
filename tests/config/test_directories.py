"""Where state and cache go: systemd's directories, else the system ones for root, else the user's own XDG ones;
and a state directory that cannot be made is refused with its field and path, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from edge_runtime.config.directories import default_cache_dir, default_state_dir, unusable_directory

REPO = Path(__file__).resolve().parents[2]

SAMPLE_VIDEO = Path(__file__).resolve().parents[2] / "samples" / "videos" / "astronaut.mp4"


@pytest.mark.parametrize("uid", [0, 1000])
def test_systemds_directories_come_first(monkeypatch: pytest.MonkeyPatch, uid: int) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: uid)
    environ = {"STATE_DIRECTORY": "/srv/a:/srv/b", "CACHE_DIRECTORY": "/srv/c", "XDG_STATE_HOME": "/home/u/state"}
    assert default_state_dir(environ) == Path("/srv/a")
    assert default_cache_dir(environ) == Path("/srv/c")


def test_root_gets_the_services_directories(monkeypatch: pytest.MonkeyPatch) -> None:
    """So that `bench --select` with sudo stores its choice where the service finds it."""
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    environ = {"HOME": "/root", "XDG_STATE_HOME": "/root/state"}
    assert default_state_dir(environ) == Path("/var/lib/edge-runtime")
    assert default_cache_dir(environ) == Path("/var/cache/edge-runtime")


def test_anyone_else_gets_their_own_xdg_directories(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert default_state_dir({"HOME": "/home/u"}) == Path("/home/u/.local/state/edge-runtime")
    assert default_cache_dir({"HOME": "/home/u"}) == Path("/home/u/.cache/edge-runtime")
    xdg = {"HOME": "/home/u", "XDG_STATE_HOME": "/data/state", "XDG_CACHE_HOME": "/data/cache"}
    assert default_state_dir(xdg) == Path("/data/state/edge-runtime")
    assert default_cache_dir(xdg) == Path("/data/cache/edge-runtime")
    relative = {"HOME": "/home/u", "XDG_STATE_HOME": "state"}  # the XDG spec: relative values are ignored
    assert default_state_dir(relative) == Path("/home/u/.local/state/edge-runtime")


def test_a_directory_is_usable_when_it_or_its_closest_ancestor_is_a_writable_directory(tmp_path: Path) -> None:
    assert unusable_directory(tmp_path) is None
    assert unusable_directory(tmp_path / "a" / "b") is None
    assert not (tmp_path / "a").exists()  # asking creates nothing
    (tmp_path / "file").write_text("")
    assert unusable_directory(tmp_path / "file") == f"{tmp_path / 'file'} is not a directory"
    assert unusable_directory(tmp_path / "file" / "state") == (
        f"cannot create {tmp_path / 'file' / 'state'}: {tmp_path / 'file'} is not a directory"
    )


def test_a_directory_this_user_may_not_write_in_is_unusable() -> None:
    """Asked by an unprivileged user (root may write in any directory: as root, the check runs as nobody)."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        root.chmod(0o755)
        locked = root / "locked"
        locked.mkdir(mode=0o555)
        check = "import sys; from pathlib import Path; from edge_runtime.config.directories import unusable_directory; "
        check += "print(unusable_directory(Path(sys.argv[1])))"
        command = [sys.executable, "-c", check, str(locked / "state")]
        if os.geteuid() == 0:
            command = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"cannot create {locked / 'state'}: {locked} is not writable by this user"


@pytest.fixture
def as_a_user(tmp_path: Path) -> dict[str, str]:
    """Environment for a command run as a user without root. Where the tests run as root, the command's
    interpreter is told it is not (a sitecustomize module): only the choice of directories reads it."""
    if os.geteuid() != 0:
        return {}
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\n\nos.geteuid = lambda: 1000\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def shell_config(tmp_path: Path, face_package_dir: Path) -> Path:
    """A config that names no directories, as someone trying the runtime from a shell writes it."""
    path = tmp_path / "config.yaml"
    pipeline = {
        "name": "faces",
        "source": {"type": "file", "path": str(SAMPLE_VIDEO)},
        "model": {"path": str(face_package_dir)},
    }
    config = {"device_id": "laptop", "mqtt": {"host": "127.0.0.1", "port": 1}, "pipelines": [pipeline]}
    path.write_text(yaml.safe_dump(config))
    return path


def test_run_from_a_shell_keeps_state_and_cache_in_the_users_directories(
    tmp_path: Path, face_package_dir: Path, edge_runtime: Any, as_a_user: dict[str, str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = as_a_user | {"HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "xdg-state"), "XDG_CACHE_HOME": ""}
    config = shell_config(tmp_path, face_package_dir)
    run = edge_runtime("run", "--config", config, "--exit-when-done", "--drain-timeout", "0", env=env, timeout=120)
    assert run.returncode in (0, 3), run.stderr  # 3: the results wait in the spool for a broker
    state, cache = tmp_path / "xdg-state" / "edge-runtime", home / ".cache" / "edge-runtime"
    said = f" INFO edge_runtime: state in {state}, cache in {cache}"
    assert any(line.endswith(said) for line in run.stderr.splitlines()), run.stderr
    assert (state / "spool.sqlite").is_file()
    assert "Traceback" not in run.stderr


def test_a_state_directory_that_cannot_be_made_is_one_line_naming_the_field(
    tmp_path: Path, face_package_dir: Path, edge_runtime: Any, as_a_user: dict[str, str]
) -> None:
    home = tmp_path / "home"
    home.write_text("a file where the home folder should be\n")
    env = as_a_user | {"HOME": str(home), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    config = shell_config(tmp_path, face_package_dir)
    run = edge_runtime("run", "--config", config, env=env)
    assert run.returncode == 2, run.stderr
    state = home / ".local" / "state" / "edge-runtime"
    assert run.stderr.splitlines() == [
        f"edge-runtime: error: invalid config file {config} (1 problem):",
        f"  {config}: state_dir: cannot create {state}: {home} is not a directory",
    ]
