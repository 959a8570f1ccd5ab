"""Whether requests are joined into batches: refused where a batch gives wrong answers, measured where it is sound."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from model_builders import build_tiny_classifier_onnx
from onnx import TensorProto, helper

from edge_runtime.package.loader import open_package
from edge_runtime.package.manifest import InputSpec, ModelFormat, Precision, Task
from edge_runtime.package.writer import describe_variant, write_package
from edge_runtime.placement.model import LoadedModel, load_model
from edge_runtime.serving.batch_choice import (
    BATCH_MARGIN,
    CHOICES_FILE,
    CHOICES_VERSION,
    BatchChoices,
    batch_problem,
    fixed_batch,
)
from edge_runtime.serving.served import ServedModel
from edge_runtime.serving.service import Serving

StartServing = Callable[..., Serving]


def package_of(root: Path, graph: onnx.GraphProto) -> Path:
    """A package with one onnx/fp32 variant holding `graph`, its input a [1, 4] tensor."""
    (root / "onnx/fp32").mkdir(parents=True)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, root / "onnx/fp32/model.onnx")
    variant = describe_variant(root, ["onnx/fp32/model.onnx"], ModelFormat.ONNX, Precision.FP32)
    spec = InputSpec(shape=(1, 4), layout="NC")
    write_package(root, {"onnx/fp32": variant}, name=root.name, task=Task.CLASSIFICATION, inputs=(spec,))
    return root


def centring_graph() -> onnx.GraphProto:
    """y = x - mean(x) over the whole tensor: right for one sample, mixing samples in a batch."""
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], keepdims=1),
        helper.make_node("Sub", ["x", "mean"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    return helper.make_graph(nodes, "centring", [x], [y])


def flattening_graph() -> onnx.GraphProto:
    """y = relu(reshape(x, [1, -1])): the batch folded into the second dimension, as some exported graphs do."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, -1])
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["flat"]), helper.make_node("Relu", ["flat"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    return helper.make_graph(nodes, "flattening", [x], [y], initializer=[shape])


@pytest.fixture(scope="module")
def fixed_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny classifier exported with a batch of one, as most exporters write it."""
    root = tmp_path_factory.mktemp("fixed_classifier")
    (root / "onnx/fp32").mkdir(parents=True)
    build_tiny_classifier_onnx(root / "onnx/fp32/model.onnx", batch=1)
    variant = describe_variant(root, ["onnx/fp32/model.onnx"], ModelFormat.ONNX, Precision.FP32)
    spec = InputSpec(shape=(1, 3, 32, 32), layout="NCHW", color_order="RGB")
    write_package(root, {"onnx/fp32": variant}, name="fixed", task=Task.CLASSIFICATION, inputs=(spec,))
    return root


def loaded(package: Path, backend: str = "onnxruntime", dynamic_batch: bool = True) -> LoadedModel:
    return load_model(open_package(package), "onnx/fp32", backend, {"dynamic_batch": dynamic_batch})


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_a_model_exported_with_a_batch_of_one_is_freed_and_batches_correctly(
    fixed_classifier: Path, backend: str
) -> None:
    model = loaded(fixed_classifier, backend)
    try:
        assert model.inputs[0].shape[0] is None and model.outputs[0].shape[0] is None
        assert fixed_batch(model) is None and batch_problem(model) is None
    finally:
        model.close()
    kept = loaded(fixed_classifier, backend, dynamic_batch=False)
    try:
        assert fixed_batch(kept) == "its input image has the fixed shape [1, 3, 32, 32]"
    finally:
        kept.close()


def test_a_graph_that_mixes_samples_is_refused_though_its_shapes_allow_a_batch(tmp_path: Path) -> None:
    model = loaded(package_of(tmp_path / "model", centring_graph()))
    try:
        assert fixed_batch(model) is None  # the shapes alone do not tell
        assert batch_problem(model) == "a batch of two changes output y of sample 0: the graph mixes the samples"
        choice = BatchChoices(tmp_path / "state").choose(model, 8)
        assert choice.max_batch_size == 0 and choice.unsound
        assert not (tmp_path / "state" / CHOICES_FILE).exists()  # nothing measured for a refused model
    finally:
        model.close()


def test_a_graph_that_folds_the_batch_away_is_refused(tmp_path: Path) -> None:
    model = loaded(package_of(tmp_path / "model", flattening_graph()))
    try:
        choice = BatchChoices(tmp_path / "state").choose(model, 8)
        assert choice.max_batch_size == 0 and choice.unsound
        # ONNX Runtime infers the Reshape's constant shape onto the output; a backend that did not would
        # run the batch and see its shape come back as [1, 8].
        assert choice.reason in (
            "cannot be batched: its output y has the fixed shape [1, 4]",
            "cannot be batched: a batch of two gives output y the shape [1, 8]",
        )
    finally:
        model.close()


def test_serving_reloads_an_unsound_model_with_its_own_shapes(start_serving: StartServing, tmp_path: Path) -> None:
    package = package_of(tmp_path / "centring", centring_graph())
    batching = {"max_batch_size": 8, "batch_when": "always"}
    serving = start_serving([{"name": "centring", "path": str(package), "batching": batching}])
    served = serving.models["centring"]
    assert served.max_batch_size == 0 and "mixes the samples" in served.batching.reason
    assert served.model.inputs[0].shape == (1, 4)  # a client batch of two is now refused, not answered wrongly
    x = np.array([[1.0, 2.0, 3.0, 6.0]], np.float32)
    np.testing.assert_allclose(served.model.infer([x])[0], x - 3.0)


def stored_choice(state: Path, model: LoadedModel, batched: float, single: float) -> None:
    """An earlier start's measurement, as the store keeps it."""
    entry = {"batch_size": 8, "batched": batched, "single": single, "measured_at": "2026-01-01T00:00:00+00:00"}
    key = BatchChoices.key(model, 8)
    (state / CHOICES_FILE).write_text(json.dumps({"version": CHOICES_VERSION, "entries": {key: entry}}))


def test_batches_are_chosen_only_when_they_beat_single_requests_by_the_margin(
    fixed_classifier: Path, tmp_path: Path
) -> None:
    model = loaded(fixed_classifier)
    state = tmp_path / "state"
    state.mkdir()
    try:
        stored_choice(state, model, batched=100.0 * BATCH_MARGIN + 1, single=100.0)
        pays = BatchChoices(state).choose(model, 8)
        assert pays.max_batch_size == 8 and pays.reason.startswith("batches pay here")
        stored_choice(state, model, batched=100.0 * BATCH_MARGIN - 1, single=100.0)
        does_not = BatchChoices(state).choose(model, 8)
        assert does_not.max_batch_size == 0 and does_not.reason.startswith("batches do not pay here")
        assert not does_not.unsound
        always = BatchChoices(state).choose(model, 8, "always")
        assert always.max_batch_size == 8 and always.measured is None
        assert BatchChoices(state).choose(model, 0).max_batch_size == 0
    finally:
        model.close()


def test_a_measurement_runs_once_is_reused_and_shown_by_probe(fixed_classifier: Path, tmp_path: Path) -> None:
    model = loaded(fixed_classifier)
    try:
        first = BatchChoices(tmp_path / "state").choose(model, 4)
        assert first.measured is not None
        assert first.measured.batched > 0 and first.measured.single > 0
        assert (first.max_batch_size == 4) == (first.measured.ratio >= BATCH_MARGIN)
        again = BatchChoices(tmp_path / "state").choose(model, 4)
        assert again.measured == first.measured  # read back, not measured anew
        assert BatchChoices(tmp_path / "state").choose(model, 2).measured != first.measured  # another batch size
    finally:
        model.close()
    command = [sys.executable, "-m", "edge_runtime", "probe", "--json", "--state-dir", str(tmp_path / "state")]
    report = json.loads(subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout)
    shown = {(entry["model"], entry["batch_size"]): entry for entry in report["batching"]}
    assert set(shown) == {("fixed onnxruntime:CPU onnx/fp32 (fp32)", 4), ("fixed onnxruntime:CPU onnx/fp32 (fp32)", 2)}
    assert shown["fixed onnxruntime:CPU onnx/fp32 (fp32)", 4]["batched"] == first.measured.batched
    assert shown["fixed onnxruntime:CPU onnx/fp32 (fp32)", 4]["batches_chosen"] == (first.max_batch_size == 4)


def test_serving_runs_single_requests_on_the_model_as_exported_where_batches_do_not_pay(
    start_serving: StartServing, fixed_classifier: Path, tmp_path: Path
) -> None:
    """A freed batch dimension costs single requests speed (kernels chosen for any shape), so the model kept
    for them is the one with its own shapes; where batches pay, the one with its batch freed."""
    model = {"name": "classifier", "path": str(fixed_classifier), "batching": {"max_batch_size": 8}}
    start_serving([model])  # measures on this box and stores the figures (rewritten below) for later starts
    choices = tmp_path / "state" / CHOICES_FILE

    def served_after_storing(batched: float, single: float) -> ServedModel:
        stored = json.loads(choices.read_text())
        assert stored["version"] == CHOICES_VERSION and stored["entries"]
        for entry in stored["entries"].values():
            entry.update(batched=batched, single=single)
        choices.write_text(json.dumps(stored))
        serving = start_serving([model])
        assert len(serving.pool.describe()) == 1  # the model not chosen was let go
        return serving.models["classifier"]

    alone = served_after_storing(batched=100.0, single=100.0)
    assert alone.max_batch_size == 0 and alone.batching.reason.startswith("batches do not pay here")
    assert alone.model.inputs[0].shape[0] == 1
    joined = served_after_storing(batched=200.0, single=100.0)
    assert joined.max_batch_size == 8 and joined.model.inputs[0].shape[0] is None
