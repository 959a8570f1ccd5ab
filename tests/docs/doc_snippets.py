"""The YAML snippets of the documentation (docs/), made into config files that `edge-runtime check-config` and
the daemon can read.

Conventions the pages follow, so that every snippet can be checked:

- A fenced ```yaml block whose top level has `device_id` is a **full config**: it is checked as it is.
- A ```yaml block whose top-level keys are all sections of the config file (`mqtt`, `serve`, `trust`, ...) or all
  fields of a pipeline (`source`, `model`, `publish`, ...) is a **fragment**: it is checked inside a small base
  config (one pipeline on the sample clip with the sample face detector), replacing the base's own sections.
- A ```yaml block with `schema_version` and `variants` at its top is a model manifest (`model.yaml`), not a config;
  one with `match` and `choices` is a device profile, which must parse as one.
  Any other ```yaml block fails the tests: mark it as another language if it is not meant to be read by the runtime.

Files a snippet names are named as a user has them, and the test makes each one:

- `/opt/edge-runtime/share/samples/...` (the samples as scripts/install.sh installs them) and `../samples/...`
  (relative to a config file in a folder of the clone, as in the getting-started pages) are the repository's
  samples;
- any other absolute path (`/opt/edge-runtime/models/NAME`, `/etc/edge-runtime/...`, `/srv/...`) is made below
  a temporary root: a model package by its name (the samples' own names, or the `model_makers` fixture in
  tests/docs/conftest.py, which converts the recipes' models with their own command lines), a video, an image
  folder, a CSV of readings, a public key (`.pub`, from `edge-runtime keys new`), or a TLS certificate or key;
- `!credential NAME` is a file in a temporary credentials directory (a URL for names with `url` in them, a token for
  names with `token`, a certificate or key for `.crt`/`.key`/`.pem`, else a password), and `${NAME}` an environment
  variable the test sets;
- once trust keys are listed, every model package the snippet names is signed with the first key, as an operator
  would before deploying.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SAMPLES = REPO / "samples"

CONFIG_SECTIONS = frozenset(
    {"device_id", "mqtt", "state_dir", "cache_dir", "stats", "log_level", "serve", "trust", "control", "rollout",
     "sources", "pipelines", "homeassistant"}
)  # fmt: skip
PIPELINE_FIELDS = frozenset({"name", "enabled", "source", "model", "preprocess", "decoder", "publish"})

# A config file's folder inside the sandbox: `../samples` from it is the sandbox's copy of the samples.
CONFIG_FOLDER = "my-box"
SAMPLE_PREFIX = "/opt/edge-runtime/share/samples/"
# Absolute paths a snippet may name, re-rooted into the sandbox; URLs are left alone (their paths follow a host).
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/\]@-])/(opt|etc|srv|var|home|data|media)/")
CREDENTIAL = re.compile(r"!credential\s+([\w.-]+)")
ENV_VARIABLE = re.compile(r"\$\{(\w+)(:-[^}]*)?\}")

BASE_SECTIONS = {
    "device_id": "device_id: docs-box\n",
    "mqtt": "mqtt:\n  host: localhost\n",
    "state_dir": "state_dir: state\n",
    "cache_dir": "cache_dir: cache\n",
}
BASE_PIPELINE = {
    "name": "name: docs",
    "source": "source:\n  type: file\n  path: ../samples/videos/astronaut.mp4",
    "model": "model:\n  path: ../samples/models/face_detection_short_range",
}


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int  # of the opening fence, 1-based
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    def data(self) -> Any:
        return yaml.load(self.text, Loader=_TaggedLoader)  # a SafeLoader with one more tag

    @property
    def kind(self) -> str:
        """'config', 'fragment', 'pipeline fragment', 'manifest', 'profile' or 'unknown'."""
        data = self.data()
        if not isinstance(data, dict):
            return "unknown"
        keys = set(data)
        if "device_id" in keys and keys <= CONFIG_SECTIONS:
            return "config"
        if {"schema_version", "variants"} <= keys:
            return "manifest"
        if {"name", "match", "choices"} <= keys:
            return "profile"
        if keys and keys <= CONFIG_SECTIONS:
            return "fragment"
        if keys and keys <= PIPELINE_FIELDS:
            return "pipeline fragment"
        return "unknown"

    def as_config(self) -> str:
        """The snippet as a whole config file: a full config as it is, a fragment inside the base config."""
        kind = self.kind
        if kind == "config":
            return self.text
        if kind == "fragment":
            present = set(self.data())
            base = "".join(text for key, text in BASE_SECTIONS.items() if key not in present)
            if "pipelines" not in present and "serve" not in present:
                base += _pipelines(BASE_PIPELINE)
            return base + self.text
        if kind == "pipeline fragment":
            present = set(self.data())
            fields = {key: text for key, text in BASE_PIPELINE.items() if key not in present}
            return "".join(BASE_SECTIONS.values()) + _pipelines(fields, extra=self.text)
        raise ValueError(f"{self.where}: not a config or a fragment of one ({kind})")


class _Tagged(str):
    """The value of a custom tag (`!credential NAME`), kept as its text."""


class _TaggedLoader(yaml.SafeLoader):
    pass


_TaggedLoader.add_constructor("!credential", lambda loader, node: _Tagged(loader.construct_scalar(node)))  # type: ignore[arg-type]


def _pipelines(fields: dict[str, str], extra: str = "") -> str:
    lines = "\n".join(fields.values())
    if extra:
        lines = lines + "\n" + extra.rstrip("\n") if lines else extra.rstrip("\n")
    body = "\n".join(("    " + line if line else line) for line in lines.splitlines())
    return "pipelines:\n  -" + body[3:] + "\n"


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def yaml_snippets(page: Path) -> list[Snippet]:
    """Every fenced ```yaml block of a page, with the line it starts on."""
    snippets = []
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = re.match(r"^(\s*)(`{3,})\s*yaml\b", lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening.group(1), opening.group(2)
        body = []
        start = index + 1
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index][len(indent) :] if lines[index].startswith(indent) else lines[index].lstrip())
            index += 1
        snippets.append(Snippet(page, start, "\n".join(body) + "\n"))
        index += 1
    return snippets


def all_snippets() -> list[Snippet]:
    return [snippet for page in pages() for snippet in yaml_snippets(page)]


def full_configs(page: str) -> list[Snippet]:
    """The full configs of one page, e.g. full_configs('recipes/rtsp-camera.md')."""
    return [s for s in yaml_snippets(DOCS / page) if s.kind == "config"]


# -- making what a snippet names ------------------------------------------------------------------------------------

ModelMaker = Callable[[Path, dict[str, Any]], None]


@dataclass
class Sandbox:
    """A temporary root holding one config file and everything it names."""

    root: Path
    model_makers: dict[str, ModelMaker] = field(default_factory=dict)
    credentials: dict[str, str] = field(default_factory=dict)  # values for !credential names, where a test cares
    env: dict[str, str] = field(default_factory=dict)

    @property
    def config_dir(self) -> Path:
        return self.root / CONFIG_FOLDER

    @property
    def credentials_dir(self) -> Path:
        return self.root / "credentials"

    def write(self, config_text: str) -> Path:
        """Write the config, with its paths moved into the sandbox, and make every file it names."""
        self.config_dir.mkdir(parents=True, exist_ok=True)
        text = ABSOLUTE_PATH.sub(lambda m: f"{self.root}/{m.group(1)}/", config_text)
        for samples in (self.root / "samples", self.root / SAMPLE_PREFIX.strip("/")):
            if not samples.exists():
                shutil.copytree(SAMPLES, samples, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        path = self.config_dir / "config.yaml"
        path.write_text(text, encoding="utf-8")
        self._make_credentials(text)
        self._make_variables(text)
        self._make_files(yaml.load(text, Loader=_TaggedLoader))
        (self.root / "state").mkdir(exist_ok=True)
        (self.root / "cache").mkdir(exist_ok=True)
        self.env |= {
            "CREDENTIALS_DIRECTORY": str(self.credentials_dir),
            "STATE_DIRECTORY": str(self.root / "state"),
            "CACHE_DIRECTORY": str(self.root / "cache"),
        }
        return path

    def _path(self, value: str) -> Path:
        path = Path(value)
        return path if path.is_absolute() else self.config_dir / path

    def _make_credentials(self, text: str) -> None:
        self.credentials_dir.mkdir(exist_ok=True)
        for name in CREDENTIAL.findall(text):
            target = self.credentials_dir / name
            if name in self.credentials:
                target.write_text(self.credentials[name])
            elif name.endswith((".crt", ".pem", ".key")):
                pki = self._pki()
                shutil.copy(pki.client_key if name.endswith(".key") else pki.client_cert, target)
            elif "url" in name:
                target.write_text("rtsp://viewer:the-password@192.0.2.10:554/stream1")
            elif "token" in name:
                target.write_text("0123456789abcdef0123456789abcdef")
            else:
                target.write_text("the-password")

    def _make_variables(self, text: str) -> None:
        for name, default in ENV_VARIABLE.findall(text):
            if not default:
                self.env.setdefault(name, "the-password")

    def _make_files(self, config: dict[str, Any]) -> None:
        pipelines = config.get("pipelines") or []
        for source in (config.get("sources") or {}).values():
            self._make_source(source)
        for pipeline in pipelines:
            if isinstance(pipeline["source"], dict):  # not the name of one in `sources:`
                self._make_source(pipeline["source"])
            self._make_model(self._path(pipeline["model"]["path"]), pipeline)
        serve = config.get("serve") or {}
        for model in serve.get("models", []):
            self._make_model(self._path(model["path"]), {})
        for section in ("trust", "control"):
            for key in (config.get(section) or {}).get("keys", []):
                if isinstance(key, str) and not isinstance(key, _Tagged):
                    self._make_key(self._path(key))
        tls = (config.get("mqtt") or {}).get("tls") or {}
        http = serve.get("http") or {}
        for value in [*tls.values(), http.get("tls_cert_file"), http.get("tls_key_file")]:
            if isinstance(value, str) and not isinstance(value, _Tagged):
                self._make_tls_file(self._path(value))
        trust_keys = [k for k in (config.get("trust") or {}).get("keys", []) if isinstance(k, str)]
        if trust_keys:
            self._sign_packages(self._path(trust_keys[0]).with_suffix(".key"), config)

    def _make_source(self, source: dict[str, Any]) -> None:
        if "path" not in source:
            return
        path = self._path(source["path"])
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        kind = source["type"]
        if kind == "file":
            shutil.copy(SAMPLES / "videos" / "astronaut.mp4", path)
        elif kind == "folder":
            path.mkdir()
            shutil.copy(SAMPLES / "images" / "astronaut.jpg", path / "astronaut.jpg")
        elif kind == "replay":
            channels = source["window"].get("channels", 1)
            rows = [",".join(str(0.01 * (i + c)) for c in range(channels)) for i in range(512)]
            path.write_text("\n".join(rows) + "\n")

    def _make_model(self, path: Path, pipeline: dict[str, Any]) -> None:
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        name = path.name
        if (SAMPLES / "models" / name).is_dir():
            shutil.copytree(SAMPLES / "models" / name, path)
        elif name in self.model_makers:
            self.model_makers[name](path, pipeline)
        else:
            raise AssertionError(
                f"the docs name a model {path.name!r} the tests cannot make: add a maker to the model_makers "
                "fixture in tests/docs/conftest.py, or name a model they know"
            )

    def _make_key(self, path: Path) -> None:
        from edge_runtime.package.signing import generate_keys

        if not path.exists():
            generate_keys(path.stem, path.parent)

    def _make_tls_file(self, path: Path) -> None:
        if path.exists():
            return
        pki = self._pki()
        path.parent.mkdir(parents=True, exist_ok=True)
        source = {".key": pki.client_key}.get(path.suffix, pki.ca_cert if "ca" in path.name else pki.client_cert)
        shutil.copy(source, path)

    def _pki(self) -> Any:
        from broker import make_pki

        if not hasattr(self, "_made_pki"):
            self._made_pki = make_pki(self.root / "pki")
        return self._made_pki

    def _sign_packages(self, private_key: Path, config: dict[str, Any]) -> None:
        from edge_runtime.package.signing import sign_package

        paths = [self._path(p["model"]["path"]) for p in config.get("pipelines") or []]
        paths += [self._path(m["path"]) for m in (config.get("serve") or {}).get("models", [])]
        expires = datetime.now(timezone.utc) + timedelta(days=1)
        for path in paths:
            if path.is_dir() and not (path / "signature.json").exists():
                sign_package(path, private_key, 1, expires)


def edge_convert(*args: str | Path) -> None:
    """`edge-convert ARGS`, as the docs run it; fails the test with its output when it fails."""
    import sys

    command = [sys.executable, "-m", "converters.cli", *map(str, args)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def edge_runtime(*args: str | Path) -> str:
    """`edge-runtime ARGS`, as the docs run it; its standard output, or the test fails with its output."""
    import sys

    command = [sys.executable, "-m", "edge_runtime", *map(str, args)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def command_lines(page: str, starting: str) -> Iterator[str]:
    """The lines of a page's ```sh blocks that start with `starting` (continuations joined)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            command = line.split("  #")[0].strip()
            if command.startswith(starting):
                yield re.sub(r"\s+", " ", command)
