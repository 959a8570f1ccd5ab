"""Helpers the rollout tests share: a camera that runs until stopped, a sink that counts, signed releases,
and a box running a pipeline that rollouts switch."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from edge_runtime.config.rollout import RolloutSettings
from edge_runtime.config.schema import PipelineConfig
from edge_runtime.decoders import make_decoder
from edge_runtime.decoders.base import Decoder
from edge_runtime.mqtt.topics import Topics
from edge_runtime.package.archive import pack, unpack
from edge_runtime.package.loader import sha256_of
from edge_runtime.package.signing import generate_keys, read_public_key, sign_package
from edge_runtime.package.trust import TrustPolicy
from edge_runtime.pipeline.build import decoder_for, input_spec_for
from edge_runtime.pipeline.outputs import PublishPolicy
from edge_runtime.pipeline.streaming import Pipeline
from edge_runtime.placement.loading import look_at_box
from edge_runtime.placement.model import LoadedModel
from edge_runtime.placement.model_pool import ModelPool
from edge_runtime.rollout.manager import RolloutHost, RolloutRequest, Rollouts
from edge_runtime.sources.base import Frame, Source, SourceConfig


class Camera(Source):
    """A camera at `fps` that keeps only the newest frame: what the pipeline does not take in time is dropped."""

    def __init__(self, image: np.ndarray, fps: float = 100.0) -> None:
        super().__init__(SourceConfig(), "camera")
        self._image, self._period = image, 1.0 / fps
        self._next = time.monotonic()

    def start(self) -> None:
        self.stats.connected = True

    def read(self, timeout: float) -> Frame | None:
        now = time.monotonic()
        missed = int((now - self._next) / self._period) if now > self._next else 0
        self.stats.dropped += missed
        self._next = max(self._next + self._period * (missed + 1), now)
        time.sleep(max(0.0, self._next - now))
        self.stats.delivered += 1
        return Frame(self._image, self.stats.delivered - 1, time.time(), self.name)

    def close(self) -> None:
        pass


class CountingSink:
    """Keeps every result message handed to it."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []
        self._lock = threading.Lock()

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        with self._lock:
            self.messages.append((topic, payload))

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.messages)


def decoder_of(model: LoadedModel) -> Decoder:
    spec = model.package.manifest.decoder
    assert spec is not None
    return make_decoder(spec.name, spec.params, model.package.manifest.labels)


def signed_release(
    source: Path, root: Path, key: Path, release: int, version: str, edit: Any = None, expires_in: float = 3600
) -> Path:
    """`source` copied to `root` as `version`, changed by `edit(manifest_dict, root)` if given, signed, packed."""
    package = root / f"release-{release}"
    shutil.copytree(source, package)
    manifest = yaml.safe_load((package / "model.yaml").read_text())
    manifest["version"] = version
    if edit is not None:
        edit(manifest, package)
    (package / "model.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    expires = datetime.now(timezone.utc) + timedelta(seconds=expires_in)
    sign_package(package, key, release, expires)
    return pack(package, root / f"release-{release}.tar")


TOPICS = Topics("edge", "box")
# The latency bound is loose here: these tests are about the steps, on a machine whose other work moves
# a 1 ms model's timings by more than the default bound; the bound itself is tested with an impossible one.
FAST = {
    "shadow": {"items": 8, "max_seconds": 30, "max_latency_ratio": 5.0},
    "probation": {"seconds": 1.0, "stall_seconds": 5.0},
}


@dataclass
class Box:
    root: Path
    key: Path
    pool: ModelPool
    trust: TrustPolicy
    pipeline: Pipeline
    sink: CountingSink
    retained: dict[str, dict[str, Any]]
    rollouts: Rollouts
    package: str
    config: PipelineConfig

    def request(self, rollout_id: str, archive: Path, **changes: Any) -> RolloutRequest:
        fields = {"package": self.package, "source": str(archive), "sha256": sha256_of(archive)} | changes
        return RolloutRequest(rollout_id, **fields)

    def run(self, request: RolloutRequest) -> Any:
        self.rollouts.start(request)
        record = self.rollouts.wait(120)
        assert record is not None, "the rollout did not end"
        return record

    def results(self) -> list[dict[str, Any]]:
        messages = [json.loads(p) for t, p in list(self.sink.messages) if t == TOPICS.result("faces")]
        return sorted(messages, key=lambda m: int(m["index"]))


@contextmanager
def live_box(face_package_dir: Path, astronaut_bgr: np.ndarray, tmp_path: Path) -> Iterator[Box]:
    """A box running pipeline `faces` on release 1 of the face package from outside its store, ready for rollouts."""
    private, public = generate_keys("ops", tmp_path / "keys")
    state = tmp_path / "state"
    trust = TrustPolicy.build([read_public_key(public)], None, state)
    first = unpack(signed_release(face_package_dir, tmp_path / "v1", private, 1, "1.0"), tmp_path / "installed")
    config = PipelineConfig.model_validate(
        {"name": "faces", "source": {"type": "folder", "path": str(tmp_path)},
         "model": {"path": str(first), "backend": "openvino", "precision": "fp32"}}
    )  # fmt: skip
    pool = ModelPool(look_at_box(), state, tmp_path / "cache", trust)
    model = pool.acquire("faces", config.model, tmp_path / "config.yaml", unpaced=config.source.unpaced)
    sink = CountingSink()
    pipeline = Pipeline(
        name="faces", topics=TOPICS, source=Camera(astronaut_bgr, fps=60), model=model,
        decoder=decoder_for(config, model), input_spec=input_spec_for(config, model), policy=PublishPolicy(), sink=sink,
    )  # fmt: skip
    retained: dict[str, dict[str, Any]] = {}
    host = RolloutHost(
        pool=pool, config_file=tmp_path / "config.yaml", pipelines=lambda: {"faces": pipeline},
        pipeline_config=lambda name: config, topics=TOPICS,
        publish=lambda topic, payload: retained.__setitem__(topic, json.loads(payload)),
    )  # fmt: skip
    rollouts = Rollouts(host, RolloutSettings.model_validate(FAST), state, trust)
    pipeline.start()
    try:
        yield Box(tmp_path, private, pool, trust, pipeline, sink, retained, rollouts, model.package.name, config)
    finally:
        rollouts.close()
        pipeline.stop()
        pool.close()


def versions_in_order(results: list[dict[str, Any]]) -> list[str]:
    """The model versions results name, one entry per run of equal versions."""
    runs: list[str] = []
    for message in results:
        if not runs or runs[-1] != message["model"]["version"]:
            runs.append(message["model"]["version"])
    return runs


def wait_for_results(box: Box, count: int) -> None:
    target = box.sink.count + count
    done = threading.Event()
    for _ in range(200):
        if box.sink.count >= target:
            done.set()
            break
        done.wait(0.05)
    assert done.is_set()
