"""Checks of a valid config against the files it names, so that `check-config` finds what `run` would.

Only enabled pipelines are checked: disabling a pipeline is how a box keeps one whose model is not
deployed yet. A package's model files are not hashed here (loading verifies them) unless the box
requires signed packages: then each is verified as `run` would before loading it. Its manifest is
read, and the pinned variant, the decoder and preprocessing overrides and the kind of source are
checked against it. A bare model file is hashed, as opening one infers its manifest that way.

The endpoints the daemon listens on are checked against each other too: two on one port would let
the config pass and `run` fail at start with "address already in use".
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from edge_runtime.config.base import describe_validation_error
from edge_runtime.config.problems import FieldPath, Problem
from edge_runtime.config.schema import DaemonConfig, DecoderOverride, PipelineConfig
from edge_runtime.errors import ConfigError, EdgeRuntimeError, ManifestError
from edge_runtime.package.loader import ModelPackage, open_package

IMAGE_LAYOUTS = ("NHWC", "NCHW")
SEQUENCE_LAYOUTS = ("NC", "NTC", "NCT")


def check_files(config: DaemonConfig) -> list[Problem]:
    problems: list[Problem] = []
    for index, pipeline in enumerate(config.pipelines):
        if pipeline.enabled:
            problems += _check_pipeline(("pipelines", index), pipeline)
    if config.serve is not None:
        problems += _check_served(config)
        problems += _check_ports(config)
    trust_problems = _check_trust(config)
    problems += trust_problems
    if config.trust.signatures_required and not trust_problems:
        problems += _check_signatures(config, {p.path for p in problems})
    tls = config.mqtt.tls
    if tls is not None:
        for name in ("ca_file", "cert_file", "key_file"):
            file = getattr(tls, name)
            if file is not None and not file.is_file():
                problems.append(Problem(("mqtt", "tls", name), f"file not found: {file}"))
    return problems


def _check_trust(config: DaemonConfig) -> list[Problem]:
    """Every key file must hold an Ed25519 public key: a box that cannot read its keys refuses every model
    (trust) or every command (control)."""
    from edge_runtime.package.signing import read_public_key

    problems = []
    for section, keys in (("trust", config.trust.keys), ("control", config.control.keys)):
        for index, key in enumerate(keys):
            if isinstance(key, Path):
                try:
                    read_public_key(key)
                except EdgeRuntimeError as error:
                    problems.append(Problem((section, "keys", index), str(error)))
    return problems


def _check_signatures(config: DaemonConfig, already: set[FieldPath | None]) -> list[Problem]:
    """The check `run` makes before loading each model, for the models not already found wanting."""
    from edge_runtime.package.store import ModelStore
    from edge_runtime.package.trust import TrustPolicy

    policy = TrustPolicy.from_settings(config.trust, config.state_dir)
    store = ModelStore(config.state_dir)  # a release a rollout made active is what `run` loads, and checks
    models: list[tuple[FieldPath, str, Path]] = [
        (("pipelines", index, "model", "path"), f"pipeline '{pipeline.name}'", pipeline.model.path)
        for index, pipeline in enumerate(config.pipelines)
        if pipeline.enabled
    ]
    if config.serve is not None:
        models += [
            (("serve", "models", index, "path"), f"served model '{model.name}'", model.path)
            for index, model in enumerate(config.serve.models)
        ]
    problems = []
    for where, label, path in models:
        if where in already:
            continue
        try:
            policy.check(store.resolve(path))
        except EdgeRuntimeError as error:
            problems.append(Problem(where, f"{label}: {error}"))
    return problems


def _check_served(config: DaemonConfig) -> list[Problem]:
    assert config.serve is not None
    problems = []
    for index, model in enumerate(config.serve.models):
        where = ("serve", "models", index, "path")
        if not model.path.exists():
            problems.append(Problem(where, f"served model '{model.name}': not found: {model.path}"))
            continue
        try:
            open_package(model.path)
        except EdgeRuntimeError as error:
            problems.append(Problem(where, f"served model '{model.name}': {error}"))
    http = config.serve.http
    for name in ("tls_cert_file", "tls_key_file"):
        file = getattr(http, name)
        if file is not None and not file.is_file():
            problems.append(Problem(("serve", "http", name), f"file not found: {file}"))
    return problems


def _check_ports(config: DaemonConfig) -> list[Problem]:
    assert config.serve is not None
    http, prometheus = config.serve.http, config.stats.prometheus
    if not (http.enabled and prometheus.enabled) or http.port != prometheus.port:
        return []
    if not _may_collide(http.host, prometheus.host):
        return []
    return [
        Problem(
            ("serve", "http", "port"),
            f"port {http.port} is also stats.prometheus.port (on {prometheus.host}): the inference endpoint and "
            "the metrics endpoint cannot listen on one port; give one of them another",
        )
    ]


def _may_collide(a: str, b: str) -> bool:
    """Whether listening on hosts `a` and `b` with one port fails: the same address, or either one every
    address (0.0.0.0, ::), since :: takes the IPv4 addresses too."""
    addresses = []
    for host in (a, b):
        try:
            address = ipaddress.ip_address("127.0.0.1" if host == "localhost" else host)
        except ValueError:  # a host name: only the same name is known to be the same address
            addresses.append(host)
            continue
        if address.is_unspecified:
            return True
        addresses.append(str(address))
    return addresses[0] == addresses[1]


def _check_pipeline(at: FieldPath, pipeline: PipelineConfig) -> list[Problem]:
    path = pipeline.model.path
    where = (*at, "model", "path")
    if not path.exists():
        return [Problem(where, f"pipeline '{pipeline.name}': model not found: {path}")]
    try:
        package = open_package(path)
    except ManifestError as error:
        return [
            Problem(
                where,
                f"pipeline '{pipeline.name}': invalid model manifest {error.source}: " + "; ".join(error.problems),
            )
        ]
    except EdgeRuntimeError as error:
        return [Problem(where, f"pipeline '{pipeline.name}': {error}")]
    return list(_check_against_package(at, pipeline, package))


def _check_against_package(at: FieldPath, pipeline: PipelineConfig, package: ModelPackage) -> Iterator[Problem]:
    manifest = package.manifest
    variant = pipeline.model.variant
    if variant is not None and variant not in manifest.variants:
        known = ", ".join(manifest.variants)
        yield Problem((*at, "model", "variant"), f"model {manifest.name} has no variant {variant!r} (it has: {known})")
    if pipeline.decoder is not None:
        yield from _check_decoder((*at, "decoder"), pipeline.decoder, package)
    if not manifest.inputs:
        return
    spec = manifest.inputs[0]
    if pipeline.preprocess is not None:
        try:
            pipeline.preprocess.applied_to(spec)
        except ValidationError as error:
            for text in describe_validation_error(error):
                problem = text.removeprefix("(top level): ")
                yield Problem((*at, "preprocess"), f"does not fit model {manifest.name}: {problem}")
    wanted, unfit = (IMAGE_LAYOUTS, SEQUENCE_LAYOUTS) if pipeline.is_camera else (SEQUENCE_LAYOUTS, IMAGE_LAYOUTS)
    if spec.layout in unfit:
        kind = "camera" if pipeline.is_camera else "sensor"
        yield Problem(
            (*at, "source", "type"),
            f"a {kind} source cannot feed model {manifest.name}: its input is {spec.layout} {list(spec.shape)}, "
            f"a {kind} source needs {' or '.join(wanted)}",
        )


def _check_decoder(at: FieldPath, override: DecoderOverride, package: ModelPackage) -> Iterator[Problem]:
    from edge_runtime.decoders import make_decoder  # imports OpenCV; only needed for an override

    try:
        spec = override.applied_to(package.manifest.decoder)
        make_decoder(spec.name, spec.params, package.manifest.labels)
    except (ValueError, ConfigError) as error:
        yield Problem(at, str(error))
