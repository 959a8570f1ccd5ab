"""The shadow step with real models on a running pipeline: a sound replacement passes, each fault is named."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from live_rollout import Camera, CountingSink, decoder_of

from edge_runtime.decoders import make_decoder
from edge_runtime.mqtt.topics import Topics
from edge_runtime.package.loader import open_package
from edge_runtime.package.manifest import InputSpec, ModelFormat, Precision, Task
from edge_runtime.package.writer import describe_variant, write_package
from edge_runtime.pipeline.outputs import PublishPolicy
from edge_runtime.pipeline.streaming import Pipeline
from edge_runtime.placement.model import LoadedModel, load_model
from edge_runtime.rollout.shadow import ShadowLimits, run_shadow


@pytest.fixture(scope="module")
def old_model(face_package_dir: Path) -> Iterator[LoadedModel]:
    model = load_model(open_package(face_package_dir), "openvino/fp32", "openvino", {"precision": "fp32"})
    yield model
    model.close()


@pytest.fixture(scope="module")
def new_model(face_package_dir: Path) -> Iterator[LoadedModel]:
    model = load_model(open_package(face_package_dir), "tflite/fp32", "litert", {"precision": "fp32"})
    yield model
    model.close()


@pytest.fixture
def live(old_model: LoadedModel, astronaut_bgr: np.ndarray) -> Iterator[tuple[Pipeline, CountingSink]]:
    sink = CountingSink()
    pipeline = Pipeline(
        name="faces", topics=Topics("edge", "box"), source=Camera(astronaut_bgr), model=old_model,
        decoder=decoder_of(old_model), input_spec=old_model.input_specs[0], policy=PublishPolicy(), sink=sink,
    )  # fmt: skip
    pipeline.start()
    yield pipeline, sink
    pipeline.stop()


def test_a_sound_replacement_passes_and_the_live_pipeline_publishes_on(
    live: tuple[Pipeline, CountingSink], new_model: LoadedModel
) -> None:
    pipeline, sink = live
    before = sink.count
    summary = run_shadow(pipeline, new_model, decoder_of(new_model), new_model.input_specs[0], ShadowLimits(items=20))
    assert summary.passed, summary.reason
    assert summary.items == 20 and summary.failed_items == 0
    assert summary.new_latency_ms is not None and summary.old_latency_ms is not None
    assert summary.fidelity_error is not None and summary.fidelity_error < 0.05
    assert sink.count > before  # the old model published all along
    assert pipeline.model.variant_id == "openvino/fp32"  # the shadow never takes over by itself


def test_a_model_whose_outputs_do_not_decode_is_refused_with_the_first_error(
    live: tuple[Pipeline, CountingSink], new_model: LoadedModel, tiny_onnx: Path
) -> None:
    pipeline, _ = live
    package = open_package(tiny_onnx)
    classifier = load_model(package, next(iter(package.manifest.variants)), "onnxruntime")
    try:
        limits = ShadowLimits(items=5)
        summary = run_shadow(pipeline, classifier, decoder_of(new_model), classifier.input_specs[0], limits)
    finally:
        classifier.close()
    assert not summary.passed and summary.failed_items == summary.items == 5
    assert summary.reason.startswith("5 of 5 items failed in the new model; the first: decoding failed:")


def test_a_model_slower_than_the_bound_is_refused(live: tuple[Pipeline, CountingSink], new_model: LoadedModel) -> None:
    pipeline, _ = live
    limits = ShadowLimits(items=10, max_latency_ratio=0.01)
    summary = run_shadow(pipeline, new_model, decoder_of(new_model), new_model.input_specs[0], limits)
    assert not summary.passed and "(at most 0.01× allowed)" in summary.reason
    assert summary.reason.startswith("the new model takes ")


def test_a_model_outside_its_fidelity_tolerance_never_reaches_the_live_items(
    live: tuple[Pipeline, CountingSink], tiny_onnx: Path, tiny_int8_onnx: Path, tmp_path: Path
) -> None:
    """An int8 variant held to a tolerance no quantized model meets: judged on the fidelity probe alone."""
    pipeline, _ = live
    for variant_id, source in (("onnx/fp32", tiny_onnx), ("onnx/int8", tiny_int8_onnx)):
        (tmp_path / variant_id).mkdir(parents=True)
        shutil.copy(source, tmp_path / variant_id / "model.onnx")
    variants = {
        f"onnx/{p.value}": describe_variant(tmp_path, [f"onnx/{p.value}/model.onnx"], ModelFormat.ONNX, p)
        for p in (Precision.FP32, Precision.INT8)
    }
    spec = InputSpec(shape=(1, 3, 32, 32), layout="NCHW", color_order="RGB", mean=(127.5,), std=(64.0,))
    write_package(tmp_path, variants, name="tiny", task=Task.CLASSIFICATION, inputs=(spec,))
    int8 = load_model(open_package(tmp_path), "onnx/int8", "onnxruntime")
    try:
        limits = ShadowLimits(items=10, fidelity_tolerance=1e-6)
        summary = run_shadow(pipeline, int8, make_decoder("classification", {}, ()), spec, limits)
    finally:
        int8.close()
    assert not summary.passed and summary.items == 0
    assert summary.fidelity_error is not None and summary.fidelity_error > 1e-6
    assert summary.reason.endswith("of their range from its fp32 variant (at most 0.0001% allowed)")


def test_too_few_items_by_the_deadline_is_a_failure(
    live: tuple[Pipeline, CountingSink], new_model: LoadedModel
) -> None:
    pipeline, _ = live
    limits = ShadowLimits(items=1000, max_seconds=0.3, min_items=500)
    summary = run_shadow(pipeline, new_model, decoder_of(new_model), new_model.input_specs[0], limits)
    assert not summary.passed and summary.reason.startswith(f"only {summary.items} items reached the shadow")
