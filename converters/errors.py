"""Errors of the converter: what the user can fix, and why a variant was not built."""

from __future__ import annotations

from edge_runtime.errors import EdgeRuntimeError


class ConversionError(EdgeRuntimeError):
    """Bad input to the converter (model file, calibration data, flags); the message names the path or flag."""


class VariantSkippedError(Exception):
    """A variant cannot be built from this kind of source; the reason goes into the report."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)
