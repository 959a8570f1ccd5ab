"""The one strict base every config, manifest and options model derives from, and its error wording.

Strict means an unknown or misspelt field is an error rather than silently ignored, since an ignored
`mean:` or `requires:` would quietly change what runs; frozen means a validated config cannot drift
afterwards. Validation problems are reported one per line, each starting with the dotted path of the
field at fault.

This module imports nothing of the project, so the manifest, the profiles, the backends' options and
the daemon's config can all build on it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["StrictModel", "describe_validation_error", "field_path"]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def field_path(loc: tuple[int | str, ...]) -> str:
    """Pydantic's location as written in a file: `inputs[0].layout`."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(f".{item}" if parts else str(item))
    return "".join(parts) or "(top level)"


def describe_validation_error(error: ValidationError) -> list[str]:
    """One line per problem, each starting with the dotted field path, e.g. `inputs[0].layout: ...`."""
    problems = []
    for item in error.errors():
        path = field_path(tuple(loc for loc in item["loc"] if not str(loc).startswith("function-")))
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field"
        problems.append(f"{path}: {message}")
    return problems
