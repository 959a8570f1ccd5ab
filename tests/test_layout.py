"""The layout keeps its promises: the stages import nothing of placement, measurement or the service."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "edge_runtime"
STAGES = ("sources", "decoders", "backends", "mqtt", "hardware", "package", "tracking")
ABOVE = ("placement", "measure", "serving", "rollout", "control", "service", "commands", "cli")
ROOT_MODULES = {"__init__.py", "__main__.py", "cli.py", "errors.py", "durable.py", "backoff.py", "strict_json.py"}


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_imports_nothing_from_above_it(stage: str) -> None:
    offending = {
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in (PACKAGE / stage).rglob("*.py")
        for module in imported_modules(path)
        if any(module == f"edge_runtime.{name}" or module.startswith(f"edge_runtime.{name}.") for name in ABOVE)
    }
    assert not offending


def test_the_root_holds_only_the_command_line_the_package_face_and_what_every_stage_shares() -> None:
    """Errors, durable files, the reconnect backoff and the reading of JSON from the network are used by sources,
    MQTT and the service alike."""
    assert {path.name for path in PACKAGE.glob("*.py")} == ROOT_MODULES
