"""Every config the documentation shows passes `edge-runtime check-config`, with the files it names in place."""

from __future__ import annotations

import contextlib
import io

import pytest
from doc_snippets import Sandbox, Snippet, all_snippets

from edge_runtime.cli import main

SNIPPETS = all_snippets()
CONFIGS = [s for s in SNIPPETS if s.kind in ("config", "fragment", "pipeline fragment")]
PROFILES = [s for s in SNIPPETS if s.kind == "profile"]


def check_config(sandbox: Sandbox, snippet: Snippet, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    path = sandbox.write(snippet.as_config())
    for name, value in sandbox.env.items():
        monkeypatch.setenv(name, value)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["check-config", str(path)])
    return status, out.getvalue() + err.getvalue()


def test_every_yaml_block_is_a_config_a_fragment_or_a_manifest() -> None:
    unknown = [s.where for s in SNIPPETS if s.kind == "unknown"]
    assert not unknown, f"yaml blocks the docs tests cannot read (see tests/docs/doc_snippets.py): {unknown}"
    # The pages a newcomer follows show whole files, which are the ones users copy.
    full = {s.page.name for s in SNIPPETS if s.kind == "config"}
    assert {"first-camera.md", "service.md", "rtsp-camera.md", "your-own-model.md"} <= full


@pytest.mark.parametrize("snippet", CONFIGS, ids=[s.where for s in CONFIGS])
def test_the_config_passes_check_config(snippet: Snippet, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    status, output = check_config(sandbox, snippet, monkeypatch)
    assert status == 0, f"{snippet.where}:\n{snippet.as_config()}\n{output}"
    assert ": ok (" in output


@pytest.mark.parametrize("snippet", PROFILES, ids=[s.where for s in PROFILES])
def test_the_device_profile_parses(snippet: Snippet) -> None:
    from edge_runtime.placement.profiles import parse_profile

    parse_profile(snippet.data(), snippet.where)
