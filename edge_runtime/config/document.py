"""Reading the config file's YAML: plain data, the line of every field, and secrets filled in.

Secrets never live in the file itself. Two forms bring them in, both resolved here before the schema
sees the data, so that the schema only ever handles the final values:

- `${NAME}` in any string is replaced by the environment variable NAME (an error if it is unset);
  `${NAME:-default}` falls back to `default` when NAME is unset or empty; `$${` is a literal `${`.
- `!credential NAME` is a value read from the file NAME in `$CREDENTIALS_DIRECTORY`, the directory
  where systemd places what the unit's `LoadCredential=` lists. For a key ending in `_file`
  (e.g. `mqtt.tls.key_file`) it is the credential file's path instead, since those fields name files.
  An empty credential (or one holding only a newline) counts as absent and reads as null, so a
  unit's `SetCredential=NAME:\\n` fallback lets one config serve boxes with and without the secret.

Every substituted value is remembered with a label (`${NAME}`, `!credential NAME`) so that error
messages can show the label instead of the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from edge_runtime.config.problems import FieldPath, Problem

CREDENTIAL_TAG = "!credential"
CREDENTIALS_VARIABLE = "CREDENTIALS_DIRECTORY"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_REFERENCE = re.compile(r"\$\$\{|\$\{(?P<body>[^}]*)\}|\$\{")
_BODY = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>.*))?", re.DOTALL)
_SHORTEST_MASKED_SECRET = 3  # shorter values would mask ordinary words in messages


@dataclass
class Document:
    data: Any
    lines: dict[FieldPath, int] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)  # value -> label shown instead
    problems: list[Problem] = field(default_factory=list)

    def line_of(self, path: FieldPath) -> int | None:
        """The line of the field, or of its closest enclosing field that is in the file."""
        for end in range(len(path), 0, -1):
            if (line := self.lines.get(path[:end])) is not None:
                return line
        return None

    def mask(self, text: str) -> str:
        for value in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(value, self.secrets[value])
        return text


class YamlSyntaxError(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def read_document(text: str, environ: Mapping[str, str]) -> Document:
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        document = Document(data=None)
        if root is not None:
            document.data = _Converter(loader, environ, document).convert(root, (), "")
        return document
    except yaml.MarkedYAMLError as error:
        raise YamlSyntaxError(_syntax_problem(error)) from None
    finally:
        loader.dispose()


def _syntax_problem(error: yaml.MarkedYAMLError) -> Problem:
    """Line and column only: PyYAML's own text quotes the offending line, which may hold a password."""
    mark = error.problem_mark or error.context_mark
    message = f"not valid YAML: {error.problem or error.context}"
    if error.context and error.problem:
        context_line = f" on line {error.context_mark.line + 1}" if error.context_mark else ""
        message += f" ({error.context}{context_line})"
    if mark is not None:
        message += f", column {mark.column + 1}"
    return Problem(None, message, mark.line + 1 if mark is not None else None)


class _Converter:
    def __init__(self, loader: yaml.SafeLoader, environ: Mapping[str, str], document: Document) -> None:
        self.loader = loader
        self.environ = environ
        self.document = document
        self.open_nodes: set[int] = set()

    def problem(self, path: FieldPath, message: str, node: Node) -> None:
        self.document.problems.append(Problem(path, message, node.start_mark.line + 1))

    def convert(self, node: Node, path: FieldPath, key: str) -> Any:
        if node.tag == CREDENTIAL_TAG:
            return self.credential(node, path, key)
        if id(node) in self.open_nodes:
            self.problem(path, "an alias refers to a value that contains it", node)
            return None
        self.open_nodes.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self.mapping(node, path)
            if isinstance(node, SequenceNode):
                return self.sequence(node, path)
            return self.scalar(node, path)
        finally:
            self.open_nodes.discard(id(node))

    def mapping(self, node: MappingNode, path: FieldPath) -> dict[str, Any] | None:
        if node.tag != _MAP_TAG:
            self.problem(path, f"unsupported tag {node.tag} on a mapping", node)
            return None
        own_keys = {id(key_node) for key_node, _ in node.value}
        self.loader.flatten_mapping(node)  # `<<: *anchor` merges: their keys come first, own keys override them
        result: dict[str, Any] = {}
        written_here: set[str] = set()
        for key_node, value_node in node.value:
            key = self.loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                self.problem(path, f"keys must be text, got {key!r}", key_node)
                continue
            child = (*path, key)
            if key in written_here and id(key_node) in own_keys:
                first = self.document.lines.get(child)
                self.problem(child, f"duplicate key (first given on line {first})", key_node)
                continue
            if id(key_node) in own_keys:
                written_here.add(key)
            self.document.lines[child] = key_node.start_mark.line + 1
            result[key] = self.convert(value_node, child, key)
        return result

    def sequence(self, node: SequenceNode, path: FieldPath) -> list[Any] | None:
        if node.tag != _SEQ_TAG:
            self.problem(path, f"unsupported tag {node.tag} on a list", node)
            return None
        items = []
        for index, item_node in enumerate(node.value):
            child = (*path, index)
            self.document.lines[child] = item_node.start_mark.line + 1
            items.append(self.convert(item_node, child, ""))
        return items

    def scalar(self, node: Node, path: FieldPath) -> Any:
        try:
            value = self.loader.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as error:
            self.problem(path, str(error.problem), node)
            return None
        return self.substitute(value, path, node) if isinstance(value, str) else value

    def substitute(self, text: str, path: FieldPath, node: Node) -> str:
        def replace(match: re.Match[str]) -> str:
            if match.group(0) == "$${":
                return "${"
            body = match.group("body")
            reference = _BODY.fullmatch(body) if body is not None else None
            if reference is None:
                self.problem(
                    path,
                    "'${' must start a reference like ${NAME} or ${NAME:-default}; write $${ for a literal ${",
                    node,
                )
                return match.group(0)
            name, default = reference.group("name"), reference.group("default")
            value = self.environ.get(name)
            if default is not None and not value:
                return default
            if value is None:
                self.problem(path, f"environment variable {name} is not set", node)
                return match.group(0)
            self.remember_secret(value, f"${{{name}}}")
            return value

        return _REFERENCE.sub(replace, text)

    def credential(self, node: Node, path: FieldPath, key: str) -> str | None:
        name = node.value if isinstance(node, ScalarNode) else ""
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            self.problem(
                path, f"{CREDENTIAL_TAG} needs the name of a credential file, e.g. {CREDENTIAL_TAG} mqtt", node
            )
            return None
        directory = self.environ.get(CREDENTIALS_VARIABLE)
        if not directory:
            self.problem(
                path,
                f"{CREDENTIAL_TAG} {name}: ${CREDENTIALS_VARIABLE} is not set "
                "(systemd sets it for LoadCredential=; outside systemd, export it)",
                node,
            )
            return None
        file = Path(directory) / name
        try:
            content = file.read_bytes()
        except FileNotFoundError:
            self.problem(path, f"credential {name} not found in {directory}", node)
            return None
        except OSError as error:
            self.problem(path, f"cannot read credential {name}: {error.strerror}", node)
            return None
        if content.strip(b"\r\n") == b"":
            return None  # what a unit's `SetCredential=NAME:\n` fallback provides: no such secret on this box
        if key.endswith("_file"):
            return str(file)
        try:
            value = content.decode("utf-8").removesuffix("\n").removesuffix("\r")
        except UnicodeDecodeError:
            self.problem(path, f"cannot read credential {name}: not UTF-8 text", node)
            return None
        self.remember_secret(value, f"{CREDENTIAL_TAG} {name}")
        return value

    def remember_secret(self, value: str, label: str) -> None:
        if len(value) >= _SHORTEST_MASKED_SECRET:
            self.document.secrets.setdefault(value, label)
