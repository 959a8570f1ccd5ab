"""Result messages: what subscribers receive on a pipeline's result topic (see `edge_runtime.mqtt.topics`).

The schema is documented as JSON Schema in `edge_runtime/schemas/result.schema.json` and every
message the tests see is validated against it. Each message carries a unique `id`: delivery is
at-least-once (a result the broker did not acknowledge before an outage is sent again), so
consumers drop repeats by id.

What stays the same for every result of a model is left out of the message: the digests of the model's
files go once to the pipeline's retained model topic (`model_record`), and a result names the model by
name, version and variant, which identify that record.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edge_runtime.placement.model import LoadedModel

SCHEMA_VERSION = 2


@dataclass(frozen=True)
class ModelInfo:
    name: str
    version: str
    variant: str


@dataclass(frozen=True)
class FrameSize:
    """The source frame's size in pixels: what boxes and keypoints are measured in, so a subscriber can scale
    them to its own picture or to fractions."""

    width: int
    height: int


@dataclass(frozen=True)
class RuntimeInfo:
    backend: str
    device: str
    precision: str


@dataclass(frozen=True)
class StageLatency:
    """Milliseconds spent in each stage; `total` runs from capture to the decoded result, queueing included."""

    pre: float
    infer: float
    post: float
    total: float


def model_info(model: LoadedModel) -> ModelInfo:
    package = model.package
    return ModelInfo(package.name, package.manifest.version, model.variant_id)


def model_record(model: LoadedModel) -> dict[str, Any]:
    """What a pipeline's retained model topic carries: the model it runs and the digests of the variant's files.

    `sha256` is the variant's first file's digest, as result messages carried it up to schema version 1;
    `files` has every file's, the weights of a two-file variant (OpenVINO's .xml and .bin) included.
    """
    package = model.package
    variant = package.manifest.variants[model.variant_id]
    return {
        "schema_version": SCHEMA_VERSION,
        **vars(model_info(model)),
        "sha256": variant.files[0].sha256,
        "files": {file.path: file.sha256 for file in variant.files},
    }


def runtime_info(model: LoadedModel) -> RuntimeInfo:
    runs_on = model.backend.runs_on
    return RuntimeInfo(runs_on.backend, runs_on.device, runs_on.precision)


def iso_time(epoch_seconds: float) -> str:
    """UTC ISO 8601 with milliseconds, the form Home Assistant and Node-RED parse without help."""
    moment = datetime.fromtimestamp(epoch_seconds, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build_result(
    *,
    device_id: str,
    pipeline: str,
    source: str,
    kind: str,
    index: int,
    frame: FrameSize | None,
    captured_at: float,
    published_at: float,
    model: ModelInfo,
    runtime: RuntimeInfo,
    latency: StageLatency,
    task: str,
    result: dict[str, Any],
) -> dict[str, Any]:
    """The result message; `frame` is the source frame's size, None for a window of sensor samples."""
    return {
        "schema_version": SCHEMA_VERSION,
        "id": str(uuid.uuid4()),
        "device_id": device_id,
        "pipeline": pipeline,
        "source": source,
        "kind": kind,
        "index": index,
        **({"frame": {"width": frame.width, "height": frame.height}} if frame is not None else {}),
        "captured_at": iso_time(captured_at),
        "published_at": iso_time(published_at),
        "model": vars(model),
        "runtime": vars(runtime),
        "latency_ms": {name: round(value, 3) for name, value in vars(latency).items()},
        "task": task,
        "result": result,
    }


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


def result_schema() -> dict[str, Any]:
    text = resources.files("edge_runtime.schemas").joinpath("result.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
