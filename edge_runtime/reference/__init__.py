"""Reference pages generated from the code: the config file, the command line, the MQTT topics.

Written from the objects the runtime itself uses (the config's pydantic models, the argparse parsers,
`Topics`), so a page cannot describe a key, option or topic the code lacks; `make reference` writes them
to docs/reference/, and a test fails when the committed pages differ from what the code gives now.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PAGES_DIR", "pages", "write_pages"]

PAGES_DIR = Path("docs/reference")


def pages() -> dict[str, str]:
    """Each page's file name and its text."""
    from edge_runtime.reference.cli import cli_page
    from edge_runtime.reference.config import config_page
    from edge_runtime.reference.topics import topics_page

    return {"config.md": config_page(), "cli.md": cli_page(), "topics.md": topics_page()}


def write_pages(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in pages().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
