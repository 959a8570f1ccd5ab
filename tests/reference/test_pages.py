"""The committed reference pages are what the code gives now, and each says how it is made."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edge_runtime.reference import PAGES_DIR, pages, write_pages
from edge_runtime.reference.markdown import COMMAND

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return pages()


def test_the_committed_pages_are_what_the_code_gives_now(generated: dict[str, str]) -> None:
    stale = [name for name, text in generated.items() if (REPO / PAGES_DIR / name).read_text(encoding="utf-8") != text]
    assert stale == [], f"docs/reference/{', '.join(stale)} out of date: run `{COMMAND}` and commit the result"


def test_every_page_starts_by_saying_it_is_generated_and_by_what(generated: dict[str, str]) -> None:
    for text in generated.values():
        first = text.splitlines()[0]
        assert "Generated" in first and f"`{COMMAND}`" in first and "python -m edge_runtime.reference" in first


def test_the_makefile_target_writes_the_pages_where_the_test_reads_them() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    target = re.search(r"^reference:.*\n\t(.*)$", makefile, re.MULTILINE)
    assert target is not None
    assert target.group(1) == f"$(BIN)/python -m edge_runtime.reference {PAGES_DIR.as_posix()}"


def test_writing_the_pages_gives_one_file_each(tmp_path: Path, generated: dict[str, str]) -> None:
    written = write_pages(tmp_path / "reference")
    assert sorted(path.name for path in written) == sorted(generated) == ["cli.md", "config.md", "topics.md"]
    assert all(path.read_text(encoding="utf-8") == generated[path.name] for path in written)


def test_every_link_within_a_page_has_its_anchor(generated: dict[str, str]) -> None:
    for name, text in generated.items():
        anchors = set(re.findall(r'<a id="([^"]+)"></a>', text))
        links = set(re.findall(r"\]\(#([^)]+)\)", text))
        assert links <= anchors, name
