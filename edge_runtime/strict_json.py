"""JSON from the network, read as the grammar (RFC 8259) has it and no deeper than a bound.

Python's `json` takes more than the grammar: `NaN`, `Infinity` and `-Infinity`, which no other JSON
reader need accept. A text carrying them is refused here. (A number too large for a float, such as
`1e999`, is in the grammar and still reads as infinity, as it would become in a tensor of FP32 from
`1e39`: where that matters the reader checks the values it takes, as the serving protocol does for
tensors; a hook on every number would cost a third of the parse.) And it parses nested arrays and
objects by recursion: 100,000 `[` in a body end in a RecursionError (the serving endpoint answered 500,
and a 3.1.1 MQTT request whose envelope could not be read went unanswered, with a traceback). So the
nesting depth is checked first, by a linear scan that counts brackets outside strings and stops at the
first one past the bound, and what is too deep is never given to the parser.

`top_level` reads only the outermost object of a document too deep (or otherwise refused) to read
whole, so that an MQTT 3.1.1 envelope still gives the reply topic where the refusal is to be answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["MAX_DEPTH", "JsonRefused", "loads", "top_level"]

# An inference request nests 4 levels plus one per dimension of a tensor sent as nested lists: 64 leaves room
# for any tensor a model takes (OpenVINO and ONNX allow at most 8 or so dimensions in practice), while keeping
# the parser's recursion far from Python's limit of 1,000 frames.
MAX_DEPTH = 64

_CHUNK = 1 << 18  # bytes scanned at once: the scan's memory stays a few MB whatever the text's size
_STEP = np.zeros(256, np.int8)  # what each byte does to the depth, outside strings
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1
_QUOTE = ord('"')
_BACKSLASH = ord("\\")


class JsonRefused(ValueError):  # noqa: N818 - a refusal to answer, not a fault
    """A text that is not JSON this reader takes; the message says why and where, for the sender. `syntax`: it
    is no JSON text at all (not UTF-8, or not the grammar), rather than JSON refused for its depth or numbers."""

    def __init__(self, message: str, syntax: bool = False) -> None:
        super().__init__(message)
        self.syntax = syntax


def loads(data: bytes | str, what: str = "the text", max_depth: int = MAX_DEPTH) -> Any:
    """The value of the JSON text `data`; JsonRefused if it is no JSON, is nested deeper than `max_depth`
    arrays and objects, or holds NaN or Infinity. The refusal's message starts with `what`."""
    raw = data.encode() if isinstance(data, str) else data
    _check_depth(raw, max_depth, what)
    return _parse(raw, what)


def top_level(data: bytes | str, what: str = "the text") -> Any:
    """The outermost value of `data` with every array and object nested in it read as null, however deep they
    go; JsonRefused if even that is no JSON."""
    raw = data.encode() if isinstance(data, str) else data
    opened: list[np.ndarray] = []
    closed: list[np.ndarray] = []
    depth = 0
    for offset, depths in _depths(raw):
        before = np.concatenate(([depth], depths[:-1]))
        opened.append(np.flatnonzero((before <= 1) & (depths >= 2)) + offset)  # the bracket opening a nested value
        closed.append(np.flatnonzero((before >= 2) & (depths <= 1)) + offset)  # and the one closing it
        depth = int(depths[-1])
    kept: list[bytes] = []
    resume = 0
    ends = iter(np.concatenate(closed).tolist())
    for start in np.concatenate(opened).tolist():
        kept.append(raw[resume:start])
        end = next(ends, None)
        if end is None:  # never closed: what is kept ends here, and is no JSON
            resume = len(raw)
            break
        kept.append(b"null")
        resume = end + 1
    kept.append(raw[resume:])
    return _parse(b"".join(kept), what)


def _depths(raw: bytes) -> Iterator[tuple[int, np.ndarray]]:
    """The depth of arrays and objects after each byte of `raw`, strings left out, a chunk at a time: its offset
    and the depths. Linear, in numpy: a Python loop over the brackets of a large body would take seconds."""
    escapes = b"\\" in raw
    depth = quotes = backslashes = 0
    for offset in range(0, len(raw), _CHUNK):
        chunk = np.frombuffer(raw, np.uint8, min(_CHUNK, len(raw) - offset), offset)
        is_quote = chunk == _QUOTE
        if escapes:
            escaped, backslashes = _escaped(chunk, backslashes)
            is_quote &= ~escaped
        quoted = np.cumsum(is_quote, dtype=np.int64) + quotes
        steps = _STEP[chunk]
        steps[(quoted & 1) == 1] = 0  # inside a string (the quote closing one is even, and no bracket)
        depths = np.cumsum(steps, dtype=np.int64) + depth
        quotes, depth = int(quoted[-1]), int(depths[-1])
        yield offset, depths


def _escaped(chunk: np.ndarray, carried: int) -> tuple[np.ndarray, int]:
    """Which bytes of `chunk` follow an odd run of backslashes (`carried` of them end the chunk before), and how
    many backslashes end this one."""
    index = np.arange(len(chunk))
    last_other = np.maximum.accumulate(np.where(chunk == _BACKSLASH, -1, index))  # -1: backslashes from the start
    run = index - last_other + np.where(last_other < 0, carried, 0)  # backslashes ending at each byte
    before = np.concatenate(([carried], run[:-1]))
    return (before & 1) == 1, int(run[-1])


def _check_depth(raw: bytes, max_depth: int, what: str) -> None:
    if raw.count(b"[") + raw.count(b"{") <= max_depth:  # no deeper than its brackets: most texts, scanned in C
        return
    for offset, depths in _depths(raw):
        if int(depths.max()) > max_depth:
            at = offset + int(np.argmax(depths > max_depth))
            raise JsonRefused(
                f"{what} is nested deeper than {max_depth} levels of arrays and objects, the most read "
                f"here (at byte {at})"
            )


def _parse(raw: bytes, what: str) -> Any:
    try:  # as json.loads reads bytes, with one decoder made once rather than one per call
        return _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except _NotFinite as number:
        raise JsonRefused(f"{what} holds {number}, which is no JSON number: JSON has finite numbers only") from None
    except UnicodeDecodeError:
        raise JsonRefused(f"{what} is not valid JSON: not UTF-8 text", syntax=True) from None
    except json.JSONDecodeError as error:
        where = f"at line {error.lineno} column {error.colno}"
        raise JsonRefused(f"{what} is not valid JSON {where}", syntax=True) from None
    except RecursionError:  # a guard: the depth was checked, but a caller may pass a larger max_depth
        raise JsonRefused(f"{what} is nested too deeply to read") from None


class _NotFinite(Exception):  # noqa: N818 - carries the number as the text gave it
    pass


def _no_constant(name: str) -> Any:
    raise _NotFinite(name)


_DECODER = json.JSONDecoder(parse_constant=_no_constant)
