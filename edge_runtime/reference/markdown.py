"""The Markdown every reference page shares: the notice that it is generated, table cells, tables."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["COMMAND", "cell", "code", "generated_notice", "sentence", "table"]

COMMAND = "make reference"


def generated_notice() -> str:
    """The first line of every page: a reader about to edit it learns where its text really lives."""
    return (
        f"_Generated from the code by `{COMMAND}` (`python -m edge_runtime.reference`): "
        "edit the code it comes from, not this page._"
    )


def cell(prose: str) -> str:
    """Prose that stays in its table cell and shows as written: a `|` would end the cell, a line break the
    row, and `<prefix>` outside a code span would be taken for an HTML tag and vanish."""
    parts = re.split(r"(`[^`]*`)", " ".join(prose.split()))
    return "".join(part if part.startswith("`") else part.replace("<", "&lt;").replace(">", "&gt;") for part in parts)


def code(text: str) -> str:
    """`text` as a code span in a table cell."""
    return f"`{text}`"


def sentence(fragment: str) -> str:
    """A description written as a fragment for a table, as the sentence that opens a section."""
    text = cell(fragment)
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(text.replace("|", "\\|") for text in row) + " |" for row in rows]
