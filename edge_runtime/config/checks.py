"""Checks of a config against the box: the files, devices, models and directories it names, so that
`check-config` refuses what `run` would. `load_config` runs them for both, and for a reload, on the parts
of the file that validated (see `parts`), so one run lists every problem.

Only pipelines `run` would start are checked: disabling one (`enabled: false`, or by an operator's
command, which the state directory keeps) is how a box keeps a pipeline whose model or camera is not
there yet. A model's package (or the release of it a rollout made active, which is what `run` loads)
must exist and its manifest read; the files of each variant the pipeline may load must be there with
the sha256 the manifest records, the check loading makes before handing a file to a backend. Where the
box requires signed packages, the signature check covers every file instead. Compiling a model in its
backend is left to `run`: it can take minutes. The pinned variant, the decoder and preprocessing
overrides, the kind of source and the `track` section are checked against the manifest: tracking needs
a decoder that gives detections, and the labels the section names, and those its zones, lines and events
name, must be the model's.

The endpoints the daemon listens on are checked against each other too: two on one port would let
the config pass and `run` fail at start with "address already in use".
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from pydantic import ValidationError

from edge_runtime.backends import BACKENDS
from edge_runtime.config.base import describe_validation_error
from edge_runtime.config.host_checks import (
    check_directories,
    check_source,
    check_source_at,
    device_notes,
    device_notes_at,
)
from edge_runtime.config.model import ModelConfig
from edge_runtime.config.parts import ConfigParts, PipelinePart
from edge_runtime.config.problems import FieldPath, Problem
from edge_runtime.config.schema import DecoderOverride, PipelineConfig
from edge_runtime.config.shared_sources import check_shared_sources, unused_source_notes
from edge_runtime.config.trust_checks import check_keys, check_signatures
from edge_runtime.decoders.decoded import Decoded
from edge_runtime.errors import ConfigError, EdgeRuntimeError, ManifestError
from edge_runtime.package.loader import ModelPackage, open_package
from edge_runtime.package.manifest import DecoderSpec
from edge_runtime.package.store import ModelStore
from edge_runtime.sources.base import SourceConfig
from edge_runtime.sources.configs import SharedSourceConfig
from edge_runtime.tracking.config import DEFAULT_FILTER

IMAGE_LAYOUTS = ("NHWC", "NCHW")
SEQUENCE_LAYOUTS = ("NC", "NTC", "NCT")


def check_parts(parts: ConfigParts) -> list[Problem]:
    """Every problem `run` would meet in these parts before it starts: pipelines, served models, endpoints,
    directories, keys, then the broker's TLS files."""
    problems: list[Problem] = []
    store = ModelStore(parts.state_dir) if parts.state_dir is not None else None
    signed = parts.trust is not None and parts.trust.signatures_required
    pipelines = _started(parts)
    for part in pipelines:
        problems += check_source(part)
        problems += _check_pipeline_model(part, store, verify=not signed)
    for name, source in _used_sources(parts, pipelines):
        problems += check_source_at(source, ("sources", name))
    problems += check_shared_sources(parts, pipelines)
    for index, served in parts.served:
        at = ("serve", "models", index)
        problems += _check_model(at, f"served model '{served.name}'", served, store, verify=not signed)[0]
    problems += _check_http(parts)
    problems += check_directories(parts)
    trust_problems = check_keys(parts)
    problems += trust_problems
    if signed and not trust_problems and parts.state_dir is not None:
        problems += check_signatures(parts, pipelines, {p.path for p in problems})
    if parts.tls is not None:
        for name in ("ca_file", "cert_file", "key_file"):
            file = getattr(parts.tls, name)
            if file is not None and not file.is_file():
                problems.append(Problem(("mqtt", "tls", name), f"file not found: {file}"))
    return problems


def note_parts(parts: ConfigParts) -> list[Problem]:
    """What is not there now but may come, and is retried while the daemon runs: cameras and serial ports."""
    pipelines = _started(parts)
    notes = [note for part in pipelines for note in device_notes(part)]
    return notes + [
        note for name, source in _used_sources(parts, pipelines) for note in device_notes_at(source, ("sources", name))
    ]


def unused_parts(parts: ConfigParts) -> list[Problem]:
    """What the file gives and nothing uses: the named sources no started pipeline reads, which are not opened."""
    return unused_source_notes(parts, _started(parts))


def _used_sources(parts: ConfigParts, pipelines: list[PipelinePart]) -> list[tuple[str, SourceConfig]]:
    """The named sources a started pipeline reads: the ones `run` opens."""
    used = {part.source.name for part in pipelines if isinstance(part.source, SharedSourceConfig)}
    return [(name, source) for name, source in parts.sources if name in used]


def _started(parts: ConfigParts) -> list[PipelinePart]:
    """The enabled pipelines less those an operator disabled on this box, which `run` leaves off too."""
    if parts.state_dir is None:
        return list(parts.pipelines)
    from edge_runtime.control.disabled import DisabledPipelines

    disabled = DisabledPipelines(parts.state_dir)
    try:
        off = set(disabled.names()) if disabled.path.is_file() else set()
    except OSError:  # a state directory this user cannot read: the directory check says so
        off = set()
    return [part for part in parts.pipelines if part.name not in off]


def _check_http(parts: ConfigParts) -> list[Problem]:
    http = parts.http
    if http is None:
        return []
    problems = []
    for name in ("tls_cert_file", "tls_key_file"):
        file = getattr(http, name)
        if file is not None and not file.is_file():
            problems.append(Problem(("serve", "http", name), f"file not found: {file}"))
    prometheus = parts.prometheus
    if prometheus is None or not (http.enabled and prometheus.enabled) or http.port != prometheus.port:
        return problems
    if _may_collide(http.host, prometheus.host):
        problems.append(
            Problem(
                ("serve", "http", "port"),
                f"port {http.port} is also stats.prometheus.port (on {prometheus.host}): the inference endpoint "
                "and the metrics endpoint cannot listen on one port; give one of them another",
            )
        )
    return problems


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


def _check_pipeline_model(part: PipelinePart, store: ModelStore | None, verify: bool) -> list[Problem]:
    if part.model is None:
        return []
    at = (*part.at, "model")
    problems, package = _check_model(at, f"pipeline '{part.name}'", part.model, store, verify)
    if package is not None and part.whole is not None:
        problems += _check_against_package(part.at, part.whole, package)
    if part.whole is not None:
        problems += _check_cascade(part.at, part.whole, package, store, verify)
    return problems


def _check_cascade(
    at: FieldPath, pipeline: PipelineConfig, detector: ModelPackage | None, store: ModelStore | None, verify: bool
) -> list[Problem]:
    """Each cascade stage's model as `run` would open it, what its decoder gives against how the stage attaches
    it, and each label it runs on against the labels the detector gives: a stage on a label the detector
    never produces would never run."""
    from edge_runtime.decoders.decoded import Classifications, Keypoints

    problems = []
    detector_labels = detector.manifest.labels if detector is not None else ()
    for index, stage in enumerate(pipeline.cascade):
        where = (*at, "cascade", index)
        label = f"pipeline '{pipeline.name}' cascade stage '{stage.name}'"
        found, package = _check_model((*where, "model"), label, stage.model, store, verify)
        problems += found
        gives = _decoder_gives(package.manifest.decoder) if package is not None else None
        if package is not None and gives is not None:
            wanted = (Classifications,) if stage.attach == "sub_label" else (Classifications, Keypoints)
            if not issubclass(gives, wanted):
                takes = " or ".join(kind.task for kind in wanted)
                problems.append(
                    Problem(
                        (*where, "attach"),
                        f"attach: {stage.attach} takes {takes} results; model {package.name}'s decoder gives "
                        f"{gives.task} results",
                    )
                )
        if detector is None:
            continue
        for position, name in enumerate(stage.labels):
            if detector_labels and name not in detector_labels:
                problems.append(
                    Problem(
                        (*where, "labels", position),
                        f"the detector, model {detector.name}, never produces label {name!r}, so the stage "
                        f"would never run; its labels: {', '.join(detector_labels)}",
                    )
                )
    if pipeline.cascade and detector is not None:
        spec = pipeline.decoder.applied_to(detector.manifest.decoder) if pipeline.decoder else detector.manifest.decoder
        gives = _decoder_gives(spec)
        from edge_runtime.decoders.decoded import Detections

        if gives is not None and not issubclass(gives, Detections):
            problems.append(
                Problem(
                    (*at, "cascade"),
                    f"a cascade runs on the crops of detections; model {detector.name}'s decoder gives "
                    f"{gives.task} results",
                )
            )
    return problems


def _decoder_gives(spec: DecoderSpec | None) -> type[Decoded] | None:
    """The result type the decoder `spec` names gives (raw without one); None for a decoder that does not exist,
    which the decoder's own check reports."""
    from edge_runtime.decoders import decoder_class  # imports OpenCV; only needed here

    try:
        return decoder_class(spec.name if spec is not None else "raw").gives
    except (ValueError, ConfigError):
        return None


def _check_model(
    at: FieldPath, label: str, model: ModelConfig, store: ModelStore | None, verify: bool
) -> tuple[list[Problem], ModelPackage | None]:
    """The model's package as `run` would open it, and what is wrong with it; `verify`: check the sha256 of
    the files of each variant the settings let the box pick."""
    try:
        return _open_model(at, label, model, store, verify)
    except OSError as error:  # a file or folder this user may not read
        return [Problem((*at, "path"), f"{label}: cannot read {error.filename}: {error.strerror}")], None


def _open_model(
    at: FieldPath, label: str, model: ModelConfig, store: ModelStore | None, verify: bool
) -> tuple[list[Problem], ModelPackage | None]:
    where = (*at, "path")
    path = store.resolve(model.path) if store is not None else model.path
    if not path.exists():
        return [Problem(where, f"{label}: model not found: {path}")], None
    try:
        package = open_package(path)
    except ManifestError as error:
        return [Problem(where, f"{label}: invalid model manifest {error.source}: " + "; ".join(error.problems))], None
    except EdgeRuntimeError as error:
        return [Problem(where, f"{label}: {error}")], None
    variants = package.manifest.variants
    if model.variant is not None and model.variant not in variants:
        known = ", ".join(variants)
        message = f"model {package.name} has no variant {model.variant!r} (it has: {known})"
        return [Problem((*at, "variant"), message)], package
    problems = []
    if verify and not package.bare_file:  # a bare file's manifest is its own hash
        for variant_id in _candidates(package, model):
            try:
                package.source(variant_id)
            except EdgeRuntimeError as error:
                problems.append(Problem(where, f"{label}: {error}"))
    return problems, package


def _candidates(package: ModelPackage, model: ModelConfig) -> list[str]:
    """The variants the box may pick for `model`: the pinned one, or those its pinned backend loads, or all."""
    if model.variant is not None:
        return [model.variant]
    variants = package.manifest.variants
    if model.backend is None:
        return list(variants)
    formats = BACKENDS[model.backend].formats
    return [variant_id for variant_id, variant in variants.items() if variant.format in formats]


def _check_against_package(at: FieldPath, pipeline: PipelineConfig, package: ModelPackage) -> Iterator[Problem]:
    manifest = package.manifest
    if pipeline.decoder is not None:
        yield from _check_decoder((*at, "decoder"), pipeline.decoder, package)
    if pipeline.track is not None and pipeline.track.enabled:
        yield from _check_track(at, pipeline, package)
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


def _check_track(at: FieldPath, pipeline: PipelineConfig, package: ModelPackage) -> Iterator[Problem]:
    """Tracking follows detections, by label: the model's decoder must give detections, and every label the
    track section, the zones, the lines and the events name must be one the model gives. A decoder override
    that does not build is reported already."""
    from edge_runtime.decoders import decoder_class  # imports OpenCV; only needed for a tracking pipeline
    from edge_runtime.decoders.decoded import Detections

    manifest = package.manifest
    try:
        spec = pipeline.decoder.applied_to(manifest.decoder) if pipeline.decoder else manifest.decoder
        gives = decoder_class(spec.name if spec is not None else "raw").gives
    except (ValueError, ConfigError):
        return
    if not issubclass(gives, Detections):
        name = spec.name if spec is not None else "raw (the manifest names no decoder)"
        yield Problem(
            (*at, "track"),
            f"tracking needs detections; model {manifest.name} is a {manifest.task.value} model whose decoder "
            f"{name} gives {gives.task} results",
        )
        return
    for where, label in _labels_named(at, pipeline):
        if manifest.labels and label not in manifest.labels:
            known = ", ".join(manifest.labels)
            yield Problem(where, f"model {manifest.name} has no label {label!r}; its labels: {known}")
        elif not manifest.labels and not label.isdigit():
            yield Problem(
                where,
                f"model {manifest.name} lists no labels, so its detections are labelled by class number "
                f"('0', '1', ...), not {label!r}",
            )


def _labels_named(at: FieldPath, pipeline: PipelineConfig) -> list[tuple[FieldPath, str]]:
    """Every label a tracking pipeline's sections name, each with its field's path."""
    track = pipeline.track
    assert track is not None
    named = [((*at, "track", "labels", index), label) for index, label in enumerate(track.labels)]
    named += [((*at, "track", "filters", label), label) for label in track.filters if label != DEFAULT_FILTER]
    for section, regions in (("zones", pipeline.zones), ("lines", pipeline.lines)):
        for name, region in regions.items():
            named += [((*at, section, name, "labels", index), label) for index, label in enumerate(region.labels)]
    if pipeline.events is not None and pipeline.events.enabled:
        named += [((*at, "events", "labels", index), label) for index, label in enumerate(pipeline.events.labels)]
    return named
