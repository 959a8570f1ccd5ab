"""Where the daemon keeps its state and its cache when the config file does not say.

Under systemd the unit's StateDirectory= and CacheDirectory= hand the service its directories
($STATE_DIRECTORY, $CACHE_DIRECTORY, colon-separated lists of which the first is ours). Root outside
systemd gets the same system paths, so that `bench --select` run with sudo stores its choice where the
service finds it. Anyone else gets their own XDG directories: a user trying the runtime from a shell
cannot write /var/lib, and the service's state is not theirs to change.

Whether a directory can be made and written is asked here too, so that `check-config` and `run` refuse
an unusable one with its field and path instead of failing at the first write.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "SYSTEM_CACHE_DIR",
    "SYSTEM_STATE_DIR",
    "default_cache_dir",
    "default_state_dir",
    "unusable_directory",
]

SYSTEM_STATE_DIR = Path("/var/lib/edge-runtime")
SYSTEM_CACHE_DIR = Path("/var/cache/edge-runtime")
_NAME = "edge-runtime"


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Stored choices, int8 checks, the spool: $STATE_DIRECTORY, else /var/lib/edge-runtime for root, else
    $XDG_STATE_HOME/edge-runtime (default ~/.local/state/edge-runtime)."""
    return _default("STATE_DIRECTORY", SYSTEM_STATE_DIR, "XDG_STATE_HOME", (".local", "state"), environ)


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Compiled models and engines: $CACHE_DIRECTORY, else /var/cache/edge-runtime for root, else
    $XDG_CACHE_HOME/edge-runtime (default ~/.cache/edge-runtime)."""
    return _default("CACHE_DIRECTORY", SYSTEM_CACHE_DIR, "XDG_CACHE_HOME", (".cache",), environ)


def _default(
    variable: str, system: Path, xdg_variable: str, xdg_fallback: tuple[str, ...], environ: Mapping[str, str] | None
) -> Path:
    environ = os.environ if environ is None else environ
    given = environ.get(variable)
    if given:
        return Path(given.split(":")[0])
    if os.geteuid() == 0:
        return system
    base = environ.get(xdg_variable)
    if base and Path(base).is_absolute():  # the XDG spec has relative values ignored
        return Path(base) / _NAME
    home = environ.get("HOME")
    return (Path(home) if home else Path.home()).joinpath(*xdg_fallback, _NAME)


def unusable_directory(path: Path) -> str | None:
    """Why `path` cannot be created, or written once it exists; None when it can. Nothing is created.

    The closest existing ancestor decides: it must be a directory this process may write in.
    """
    existing = path
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        if existing == path:
            return f"{path} is not a directory"
        return f"cannot create {path}: {existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
        if existing == path:
            return f"{path} is not writable by this user"
        return f"cannot create {path}: {existing} is not writable by this user"
    return None
