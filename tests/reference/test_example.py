"""`edge-runtime config example`: a file the loader takes as it is, once it names a real model.

Its optional sections and other kinds of source are commented out; each is taken in here the way the
file says to (one `# ` removed from each of its lines) and must pass the schema too.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from edge_runtime.cli import main
from edge_runtime.commands.check_config import run_check_config
from edge_runtime.config import ConfigFileError, DaemonConfig, load_config
from edge_runtime.reference.example import config_example
from edge_runtime.reference.fields import keys_of, walk

PLACEHOLDER_MODEL = "models/face_detection"


@pytest.fixture(scope="module")
def example() -> str:
    return config_example()


@pytest.fixture(autouse=True)
def box_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The state and cache directories as systemd would give them: the example leaves both to the environment."""
    environ = {"STATE_DIRECTORY": str(tmp_path / "state"), "CACHE_DIRECTORY": str(tmp_path / "cache")}
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return environ


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_only_the_model_path_needs_a_value_of_the_users(
    example: str, tmp_path: Path, box_directories: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, example)
    with pytest.raises(ConfigFileError) as error:
        load_config(path, environ=box_directories)
    [problem] = error.value.problems
    assert re.fullmatch(rf"{path}:\d+: pipelines\[0\]\.model\.path: pipeline 'entrance': model not found: .*", problem)
    assert problem.endswith(str(tmp_path / PLACEHOLDER_MODEL))

    assert run_check_config(argparse.Namespace(file=path)) == 2
    assert capsys.readouterr().err.splitlines() == [problem, f"{path}: 1 problem"]


def test_with_a_real_model_the_example_is_accepted(
    example: str, tmp_path: Path, face_package_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the pipeline's, a cascade stage's and the served model's (both commented)
    assert example.count(f"path: {PLACEHOLDER_MODEL}") == 3
    path = write(tmp_path, example.replace(f"      path: {PLACEHOLDER_MODEL}", f"      path: {face_package_dir}"))
    assert run_check_config(argparse.Namespace(file=path)) == 0
    assert capsys.readouterr().out == f"{path}: ok (1 pipeline: entrance)\n"


def test_every_key_is_written_with_its_description(example: str) -> None:
    for key in walk(keys_of(DaemonConfig)):
        if key.path.endswith("keys[].pem"):
            continue  # an inline key goes in a list that is empty by default
        assert re.search(rf"^[ #]*{key.name}:", example, re.MULTILINE), key.path
        first_words = " ".join(key.description.split()[:4])
        assert first_words in " ".join(line.strip(" #") for line in example.splitlines()), key.path


@pytest.mark.parametrize(
    ("section", "indent"),
    [("serve", 0), ("tls", 2), ("motion", 6), ("preprocess", 4), ("decoder", 4), ("track", 4)],
)
def test_each_optional_section_taken_in_passes_the_schema(example: str, section: str, indent: int) -> None:
    text = uncommented(example, section, indent)
    assert f"\n{' ' * indent}{section}:\n" in text
    DaemonConfig.model_validate(loaded(text))


def test_zones_lines_and_events_taken_in_with_track_pass_the_schema_and_refuse_to_go_without_it(example: str) -> None:
    text = example
    for section in ("zones", "lines", "events"):
        text = uncommented(text, section, 4)
    with pytest.raises(ValidationError, match="needs track"):
        DaemonConfig.model_validate(loaded(text))
    pipeline = DaemonConfig.model_validate(loaded(uncommented(text, "track", 4))).pipelines[0]
    assert list(pipeline.zones) == ["yard"] and list(pipeline.lines) == ["gate"] and pipeline.follows_objects


@pytest.mark.parametrize("kind", ["stream", "file", "folder", "mqtt", "serial", "replay"])
def test_each_other_kind_of_source_taken_in_passes_the_schema(example: str, kind: str) -> None:
    """The commented source replaces the active one, which the file says it stands in for."""
    lines = example.splitlines()
    start = lines.index("    source:")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("      "))
    text = uncommented("\n".join(lines[:start] + lines[end:]), "source", 4, holding=f"type: {kind}")
    config = DaemonConfig.model_validate(loaded(text))
    assert config.pipelines[0].source.type == kind


def test_the_command_prints_the_example(example: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "example"]) == 0
    assert capsys.readouterr().out == example


def uncommented(text: str, section: str, indent: int, holding: str = "") -> str:
    """`text` with the first commented-out `section` at `indent` (that holds `holding`) taken in: one `# ` off
    each of its lines."""
    pad = " " * indent
    lines = text.splitlines()
    for start in (i for i, line in enumerate(lines) if line == f"{pad}# {section}:"):
        end = start + 1
        while end < len(lines) and lines[end].startswith(f"{pad}#   "):
            end += 1
        taken = [pad + line[indent + 2 :] for line in lines[start:end]]
        if any(line.strip() == holding for line in taken) or not holding:
            return "\n".join(lines[:start] + taken + lines[end:]) + "\n"
    raise AssertionError(f"no commented-out {section} holding {holding!r}")


def loaded(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data | {"state_dir": "/var/lib/edge-runtime", "cache_dir": "/var/cache/edge-runtime"}
