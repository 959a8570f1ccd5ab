"""Problems found in a config file, each pointing at a field and, where known, a line of the file."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from edge_runtime.errors import ConfigError

FieldPath = tuple[str | int, ...]


def field_path_text(path: FieldPath) -> str:
    """`pipelines[0].source.url`, the way a user would point at the field in the file."""
    text = ""
    for item in path:
        text += f"[{item}]" if isinstance(item, int) else (f".{item}" if text else str(item))
    return text or "(top level)"


@dataclass(frozen=True)
class Problem:
    """One thing wrong; `path` None means the file as a whole (unreadable, not YAML)."""

    path: FieldPath | None
    message: str
    line: int | None = None

    def render(self, file: str) -> str:
        where = f"{file}:{self.line}" if self.line is not None else file
        if self.path is None:
            return f"{where}: {self.message}"
        return f"{where}: {field_path_text(self.path)}: {self.message}"


class ConfigFileError(ConfigError):
    """A daemon config file cannot be used; `problems` holds one line per problem, secrets masked."""

    def __init__(self, file: str, problems: Sequence[str]) -> None:
        self.file = file
        self.problems = list(problems)
        count = f"{len(self.problems)} problem" + ("s" if len(self.problems) != 1 else "")
        super().__init__(f"invalid config file {file} ({count}):\n  " + "\n  ".join(self.problems))
