"""What users install: the wheel and sdist carry every module and data file, and the wheel installed into a
fresh virtualenv, outside the checkout, finds its backends and runs a pipeline to a broker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from broker import Mosquitto

REPO = Path(__file__).resolve().parents[1]
FACE_MODEL = REPO / "samples/models/face_detection_short_range"
CLIP = REPO / "samples/videos/astronaut.mp4"


# Left out of the copy a release is built from: what earlier builds and tools leave in a checkout. setuptools
# would take files listed in a stale *.egg-info/SOURCES.txt or left in build/, hiding a package missing from
# pyproject.toml.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", ".venv*", "__pycache__", ".*_cache", ".cache", "test-reports", "demo-output"
)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist, built from a clean copy of the checkout, and the wheel built from the sdist, as pip builds
    one from an index."""
    out = tmp_path_factory.mktemp("dist")
    source = tmp_path_factory.mktemp("source") / "edge-runtime"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE, symlinks=True)
    sdist = [sys.executable, "-c", "from setuptools import build_meta as b; import sys; b.build_sdist(sys.argv[1])",
             str(out)]  # fmt: skip
    subprocess.run(sdist, check=True, capture_output=True, timeout=600, cwd=source)
    [archive] = out.glob("edge_runtime-*.tar.gz")
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out),
               str(archive)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    return out


def source_files() -> set[str]:
    """Every module of the runtime and the converter, as the wheel names them."""
    modules = {
        p.relative_to(REPO).as_posix() for root in ("edge_runtime", "converters") for p in (REPO / root).rglob("*.py")
    }
    return {m for m in modules if "__pycache__" not in m}


def test_the_wheel_ships_every_module_the_profiles_and_the_entry_points(dist: Path) -> None:
    [wheel] = dist.glob("edge_runtime-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    assert sorted(source_files() - names) == []  # e.g. a backend's sub-package left out of pyproject.toml
    profiles = {Path(n).name for n in names if n.startswith("edge_runtime/device_profiles/") and n.endswith(".yaml")}
    shipped = {p.name for p in (REPO / "device_profiles").glob("*.yaml")}
    assert profiles == shipped and len(shipped) >= 10
    assert "edge-runtime = edge_runtime.cli:main" in scripts and "edge-convert = converters.cli:main" in scripts
    schemas = {f"edge_runtime/schemas/{name}.schema.json" for name in ("result", "event", "crossing", "totals")}
    assert schemas <= names and "edge_runtime/py.typed" in names
    assert not any(n.startswith(("tests/", "samples/", "bench/")) for n in names)


def test_the_sdist_builds_the_same_wheel_contents(dist: Path) -> None:
    [sdist] = dist.glob("edge_runtime-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert sorted(source_files() - names) == []
    assert {"pyproject.toml", "README.md", "LICENSE"} <= names


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the wheel, not the checkout. Its dependencies (OpenVINO, OpenCV, ...) are
    the test environment's, reached through a path entry that is not a site directory, so that environment's
    editable install of the checkout is not seen; the test needs no network."""
    venv = tmp_path_factory.mktemp("venv") / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    [wheel] = dist.glob("edge_runtime-*.whl")
    fresh_site = Path(subprocess.run(
        [str(venv / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip())  # fmt: skip
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
               "--target", str(fresh_site), str(wheel)]  # fmt: skip
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    (fresh_site / "zz-test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (venv / "bin/edge-runtime").write_text(
        f"#!{venv / 'bin/python'}\nimport sys\nfrom edge_runtime.cli import main\nsys.exit(main())\n"
    )
    (venv / "bin/edge-runtime").chmod(0o755)
    return venv


def clean_env() -> dict[str, str]:
    """The environment without what would put the checkout back on the path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def run_installed(venv: Path, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin/edge-runtime"), *args], cwd=cwd, env=clean_env(), capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def test_the_installed_wheel_is_what_runs(installed: Path, tmp_path: Path) -> None:
    where = subprocess.run(
        [str(installed / "bin/python"), "-c", "import edge_runtime.backends.openvino.backend as b; print(b.__file__)"],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert where.startswith(str(installed)), where


def test_the_installed_wheel_probes_a_model_on_its_backend(installed: Path, tmp_path: Path) -> None:
    probe = run_installed(installed, "probe", "--model", str(FACE_MODEL), cwd=tmp_path)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert "No module named" not in probe.stdout + probe.stderr
    assert "openvino" in probe.stdout.lower()


def test_the_installed_wheel_runs_a_pipeline_to_a_broker(installed: Path, tmp_path: Path) -> None:
    with Mosquitto(tmp_path / "broker") as broker:
        broker.start()
        results = broker.subscribe_collect("edge/wheel-box/faces/result")
        config = {
            "device_id": "wheel-box",
            "mqtt": {"host": broker.host, "port": broker.port},
            "state_dir": str(tmp_path / "state"),
            "cache_dir": str(tmp_path / "cache"),
            "pipelines": [{"name": "faces", "source": {"type": "file", "path": str(CLIP)},
                           "model": {"path": str(FACE_MODEL)}}],
        }  # fmt: skip
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
        run = run_installed(installed, "run", "--config", str(tmp_path / "config.yaml"), "--exit-when-done",
                            cwd=tmp_path)  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        assert results.wait_count(10, timeout=30)
        first = json.loads(results.payloads()[0])
        assert first["device_id"] == "wheel-box" and first["task"] == "detection"
