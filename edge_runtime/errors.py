"""Errors a user can act on.

Every error raised for bad input says what is wrong and where (file, manifest field, option), so the
command line can print it as one line instead of a traceback.
"""

from __future__ import annotations


class EdgeRuntimeError(Exception):
    """Base class of every error the command line reports as a plain message."""


class ManifestError(EdgeRuntimeError):
    """A model manifest is missing, unreadable or does not follow the schema."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        joined = "\n  ".join(problems)
        super().__init__(f"invalid model manifest {source}:\n  {joined}")


class ModelIntegrityError(EdgeRuntimeError):
    """A model file is missing, corrupt, or its checksum does not match the manifest."""


class ModelMismatchError(EdgeRuntimeError):
    """The model file disagrees with what its manifest promises (inputs, outputs)."""


class BackendUnavailableError(EdgeRuntimeError):
    """A backend's library, device or delegate cannot be used on this box."""


class ModelLoadError(EdgeRuntimeError):
    """The backend library refused to load or compile a model."""


class ConfigError(EdgeRuntimeError):
    """A configuration value (profile, option, command-line flag) is invalid."""


class FidelityError(EdgeRuntimeError):
    """A backend/precision choice differs from the fp32 reference by more than the tolerance."""


class UnknownNameError(ConfigError):
    """A name looked up in one of the registries (backend, source type, decoder) is not there."""

    def __init__(self, kind: str, name: str, known: tuple[str, ...]) -> None:
        self.kind = kind
        self.name = name
        self.known = known
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(known)}")


class PackageRefused(EdgeRuntimeError):  # noqa: N818  (a refusal of untrusted input, not a fault)
    """A model package failed its signature check and must not be loaded.

    `kind` names the check for programs and logs (unsigned, unknown_key, bad_signature, other_package,
    manifest_changed, file_changed, expired, rollback, unreadable); `reason` says it for people.
    """

    def __init__(self, path: str, reason: str, *, kind: str = "refused") -> None:
        self.path = path
        self.reason = reason
        self.kind = kind
        super().__init__(f"package {path} refused: {reason}")


class ArchiveRefused(EdgeRuntimeError):  # noqa: N818  (a refusal of untrusted input, not a fault)
    """A package archive is unsafe to unpack (escaping path, link, device, over a limit) or malformed.

    `member` is the archive member at fault, None when the archive as a whole is.
    """

    def __init__(self, archive: str, member: str | None, reason: str) -> None:
        self.archive = archive
        self.member = member
        self.reason = reason
        where = f"{archive}: {member!r}" if member is not None else archive
        super().__init__(f"archive {where} refused: {reason}")
