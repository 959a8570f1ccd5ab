"""The LiteRT interpreter package: `ai_edge_litert`, else `tflite_runtime`, else `tensorflow`.

Each is imported on first use, never when this module is imported, and only counts once it has
built an interpreter: a package can import fine and still be unusable.
"""

from __future__ import annotations

import base64
import functools
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_runtime.errors import BackendUnavailableError

INTERPRETER_MODULES = (
    "ai_edge_litert.interpreter",
    "tflite_runtime.interpreter",
    "tensorflow.lite.python.interpreter",
)
# A valid model holding one float tensor. A compiled interpreter wrapper first calls NumPy's C API
# when it creates an interpreter, not when it is imported, so building this one proves it works.
_PROBE_MODEL = base64.b64decode(
    "CAAAAFRGTDPC////FAAAACAAAAAoAAAApAAAAAMAAAABAAAACAAAAAQABAAEAAAABQAAAHNtb2tlAAAAAQAAABQAAAAAAA4A"
    "GAAUABAADAAIAAQADgAAABQAAAAcAAAAHAAAACAAAAAkAAAABAAAAG1haW4AAAAAAAAAAAEAAAAAAAAAAQAAAAAAAAABAAAA"
    "EAAAAAwADAAIAAAAAAAEAAwAAAAIAAAADAAAAAEAAAB4AAAAAQAAAAEAAAAAAAAA"
)
_NUMPY1_SIGNS = ("_ARRAY_API", "numpy.core.multiarray failed to import", "compiled using NumPy 1.x")


@dataclass(frozen=True)
class InterpreterLibrary:
    """The interpreter package in use, and why each one before it in the search order was passed over."""

    name: str
    version: str
    module: Any
    passed_over: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    def create(self, delegate: Any | None, threads: int, default_delegates: bool = True, **model: Any) -> Any:
        """An interpreter; without default delegates LiteRT does not apply XNNPACK by itself."""
        kwargs: dict[str, Any] = {"num_threads": threads}
        if delegate is not None:
            kwargs["experimental_delegates"] = [delegate]
        resolver = getattr(self.module, "OpResolverType", None)
        if resolver is not None and not default_delegates:
            kwargs["experimental_op_resolver_type"] = resolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        return self.module.Interpreter(**model, **kwargs)


def import_interpreter(candidates: Sequence[str] = INTERPRETER_MODULES) -> InterpreterLibrary:
    """The first candidate module that imports and builds an interpreter.

    Importing is not proof enough: a tflite_runtime wheel built for NumPy 1.x imports beside NumPy 2
    and fails only when it creates an interpreter, so each candidate builds a tiny one.
    """
    passed_over: list[str] = []
    for module_name in candidates:
        top = module_name.partition(".")[0]
        try:
            module = importlib.import_module(module_name)
            version = str(getattr(sys.modules[top], "__version__", "unknown"))
            library = InterpreterLibrary(top, version, module)
            library.create(None, threads=1, default_delegates=False, model_content=_PROBE_MODEL)
        except Exception as exc:
            passed_over.append(_why_unusable(top, exc))
            continue
        return InterpreterLibrary(library.name, library.version, library.module, tuple(passed_over))
    raise BackendUnavailableError(
        f"no LiteRT interpreter is usable ({'; '.join(passed_over)}); install one: pip install ai-edge-litert"
    )


@functools.lru_cache(maxsize=1)
def interpreter_library() -> InterpreterLibrary:
    return import_interpreter()


def _why_unusable(top: str, exc: BaseException) -> str:
    chain: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    if any(sign in str(error) for error in chain for sign in _NUMPY1_SIGNS):
        return f"{top} was built for NumPy 1.x; install ai-edge-litert or numpy<2 (NumPy {np.__version__} is installed)"
    return f"{top}: {type(exc).__name__}: {exc}"
