"""Durable replacement: the new content or the old, and no temporary file left behind either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_runtime.durable import replace_file


def test_replaces_content_and_creates_missing_directories(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "state.json"
    replace_file(target, "one")
    replace_file(target, b"two")
    assert target.read_text() == "two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.json"]


def test_a_failed_replacement_keeps_the_old_file_and_leaves_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.mkdir()  # a directory cannot be replaced by a file
    (target / "inside").write_text("kept")
    with pytest.raises(OSError):
        replace_file(target, "new")
    assert target.is_dir() and (target / "inside").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]
