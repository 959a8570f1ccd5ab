"""The wheel carries what an edge box needs: the device profiles as package data, the console script."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_wheel_ships_profiles_and_entry_point(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(REPO)]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    [wheel] = tmp_path.glob("edge_runtime-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    profiles = {Path(n).name for n in names if n.startswith("edge_runtime/device_profiles/") and n.endswith(".yaml")}
    shipped = {p.name for p in (REPO / "device_profiles").glob("*.yaml")}
    assert profiles == shipped and len(shipped) >= 10
    assert "edge-runtime = edge_runtime.cli:main" in scripts
    assert "converters/__init__.py" in names
    assert not any(n.startswith(("tests/", "samples/", "bench/")) for n in names)
    source_packages = {p.parent.relative_to(REPO).as_posix() for p in (REPO / "edge_runtime").rglob("__init__.py")}
    assert {p for p in source_packages if f"{p}/__init__.py" not in names} == set()
    assert "edge_runtime/schemas/result.schema.json" in names
