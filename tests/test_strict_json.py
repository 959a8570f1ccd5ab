"""JSON from the network: the grammar's numbers only, a bounded depth checked before parsing, in linear time."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest

from edge_runtime import strict_json
from edge_runtime.strict_json import JsonRefused


def deepest(text: bytes) -> int:
    """The nesting depth of `text`, character by character: what the numpy scan must agree with."""
    depth = most = 0
    in_string = escaped = False
    for char in text.decode():
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            most = max(most, depth)
        elif char in "]}":
            depth -= 1
    return most


def some_value(rng: random.Random, depth: int = 0) -> Any:
    if depth > 6 or rng.random() < 0.3:
        return rng.choice([1, 2.5, None, True, 'a\\"]', "[{\\\\", '\\\\\\"x', '"\\', "", "]]]}"])
    if rng.random() < 0.5:
        return [some_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["k", '\\"[', "x]"]) + str(i): some_value(rng, depth + 1) for i in range(rng.randint(0, 3))}


def test_a_deep_text_is_refused_naming_the_limit_before_it_is_parsed() -> None:
    with pytest.raises(JsonRefused, match=r"^the request is nested deeper than 64 levels .* \(at byte 64\)$"):
        strict_json.loads(b"[" * 100_000, "the request")
    assert isinstance(strict_json.loads(b"[" * 64 + b"]" * 64), list)  # 64 levels are read
    assert strict_json.loads(b'{"a": [[1]]}', max_depth=3) == {"a": [[1]]}
    with pytest.raises(JsonRefused, match="deeper than 2 levels"):
        strict_json.loads(b'{"a": [[1]]}', max_depth=2)


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 18])
def test_brackets_and_escaped_quotes_inside_strings_do_not_count(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(strict_json, "_CHUNK", chunk)  # a string, an escape or a run across the scan's chunks
    rng = random.Random(chunk)
    for _ in range(80):
        value = some_value(rng)
        text = json.dumps(value).encode()
        depth = deepest(text)
        assert strict_json.loads(text, max_depth=depth) == value
        if depth > 0:
            with pytest.raises(JsonRefused, match=f"deeper than {depth - 1} levels"):
                strict_json.loads(text, max_depth=depth - 1)
        envelope = {"reply_to": "app/answers", "correlation_id": 7, "request": value}
        expected = {key: None if isinstance(item, (list, dict)) else item for key, item in envelope.items()}
        assert strict_json.top_level(json.dumps(envelope)) == expected


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        (b'{"data": [1.0, NaN]}', "the text holds NaN, which is no JSON number: JSON has finite numbers only"),
        (b'{"data": [Infinity]}', "the text holds Infinity, which is no JSON number: JSON has finite numbers only"),
        (b'{"data": [-Infinity]}', "the text holds -Infinity, which is no JSON number: JSON has finite numbers only"),
        (b'{"data": [1.0,', "the text is not valid JSON at line 1 column 15"),
        (b"\xff\xd8\xff\xe0 a JPEG", "the text is not valid JSON: not UTF-8 text"),
    ],
)
def test_what_json_does_not_have_is_refused(text: bytes, refusal: str) -> None:
    with pytest.raises(JsonRefused) as refused:
        strict_json.loads(text)
    assert str(refused.value) == refusal
    assert refused.value.syntax == ("not valid JSON" in refusal)


def test_the_top_level_of_a_deep_envelope_names_its_reply_topic_and_an_unclosed_one_is_no_json() -> None:
    deep = b'{"reply_to": "app/a", "request": ' + b"[" * 100_000 + b"]" * 100_000 + b', "correlation_id": "c"}'
    assert strict_json.top_level(deep) == {"reply_to": "app/a", "request": None, "correlation_id": "c"}
    with pytest.raises(JsonRefused, match="not valid JSON"):
        strict_json.top_level(b'{"reply_to": "app/a", "request": ' + b"[" * 100_000)


@pytest.mark.parametrize(
    "hostile",
    [b"[" * 10_000_000, b"[]" * 5_000_000, b'"' + b'\\"' * 5_000_000, b"\\" * 10_000_000],
    ids=["open", "alternating", "escaped-quotes", "backslashes"],
)
def test_ten_megabytes_of_brackets_or_escapes_take_well_under_a_second(hostile: bytes) -> None:
    started = time.perf_counter()
    for read in (strict_json.loads, strict_json.top_level):
        with pytest.raises(JsonRefused):
            read(hostile)
    assert time.perf_counter() - started < 2.0  # both together; a loop in Python over the brackets took 4 s
