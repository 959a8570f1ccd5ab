"""How a name written in a config (a backend key, a source type, a decoder name) finds its implementation.

Each registry is an explicit table, name → (module, class), read in one place per kind. The module is
imported on first use, so a table can list a backend or source whose library is missing on this box;
an unknown name is one `UnknownNameError` that lists the known ones.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from edge_runtime.errors import UnknownNameError

__all__ = ["load_class"]


def load_class(kind: str, name: str, table: Mapping[str, tuple[str, str]], base: type) -> type[Any]:
    """The class registered as `name`, checked to derive from `base` (abstract bases welcome)."""
    if name not in table:
        raise UnknownNameError(kind, name, tuple(table))
    module, class_name = table[name]
    found = getattr(importlib.import_module(module), class_name)
    if not (isinstance(found, type) and issubclass(found, base)):
        raise TypeError(f"{module}.{class_name}, registered as {kind} {name!r}, is not a {base.__name__}")
    return found
