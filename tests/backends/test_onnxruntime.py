"""The ONNX Runtime backend on the real CPU build of onnxruntime.

GPU providers cannot run here; their option mapping, the refusal on a build without them, and the
honest report when ONNX Runtime drops a provider are tested through the real library instead.
"""

from __future__ import annotations

import ctypes.util
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from int8_models import scale_of, tiny_images
from model_builders import build_tiny_classifier_onnx
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper

from edge_runtime.backends import load_backend
from edge_runtime.backends.base import ModelSource
from edge_runtime.backends.onnxruntime.backend import (
    OnnxRuntimeBackend,
    OnnxRuntimeOptions,
    build_providers,
    cuda_driver_device_names,
    describe_runs_on,
    nvidia_device_names,
)
from edge_runtime.backends.onnxruntime.precision import ModelFacts, effective_precision, inspect_model, scan_model_bytes
from edge_runtime.backends.onnxruntime.providers import CPU, CUDA, OPENVINO, TENSORRT
from edge_runtime.errors import BackendUnavailableError, ModelLoadError, ModelMismatchError
from edge_runtime.package.manifest import ModelFormat, Precision

REPO = Path(__file__).resolve().parents[2]


def source(path: Path, precision: Precision = Precision.FP32) -> ModelSource:
    return ModelSource(path=path, format=ModelFormat.ONNX, precision=precision, variant_id="v", sha256="")


def load(path: Path, **options: Any) -> OnnxRuntimeBackend:
    backend = load_backend("onnxruntime", source(path), options)
    assert isinstance(backend, OnnxRuntimeBackend)
    return backend


def numpy_classifier(model_path: Path, image: np.ndarray) -> np.ndarray:
    """The tiny classifier computed by hand: 3x3 conv (pad 1), relu, global average pool, gemm, softmax."""
    weights = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in onnx.load(model_path).graph.initializer}
    padded = np.pad(image[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    windows = sliding_window_view(padded, (3, 3), axis=(1, 2))
    conv = np.einsum("chwij,ocij->ohw", windows, weights["conv_w"]) + weights["conv_b"][:, None, None]
    logits = weights["fc_w"] @ np.maximum(conv, 0).mean(axis=(1, 2)) + weights["fc_b"]
    exp = np.exp(logits - logits.max())
    return (exp / exp.sum())[None, :]


@pytest.fixture(scope="module")
def fp16_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bias = numpy_helper.from_array(np.array([1, 2, 3, 4], dtype=np.float16), "bias")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["y"])],
        "fp16_add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 4])],
        initializer=[bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("fp16") / "add_fp16.onnx"
    onnx.save(model, path)
    return path


def test_tiny_model_loads_with_its_tensor_specs(tiny_onnx: Path) -> None:
    backend = load(tiny_onnx)
    assert [(t.name, t.shape, t.dtype) for t in backend.inputs] == [("image", (1, 3, 32, 32), "float32")]
    assert [(t.name, t.shape, t.dtype) for t in backend.outputs] == [("probabilities", (1, 10), "float32")]
    runs_on = backend.runs_on
    assert (runs_on.backend, runs_on.device, runs_on.precision) == ("onnxruntime", "CPU", "fp32")
    assert runs_on.details["providers"] == CPU
    assert runs_on.details["io_binding"] == "off"
    assert runs_on.device_name and "fallback" not in runs_on.details


def test_outputs_match_a_hand_computed_reference(tiny_onnx: Path, rng: np.random.Generator) -> None:
    backend = load(tiny_onnx)
    for image in tiny_images(rng, 4):
        (probabilities,) = backend.infer([image])
        assert probabilities.shape == (1, 10)
        np.testing.assert_allclose(probabilities, numpy_classifier(tiny_onnx, image), atol=1e-5)


def test_outputs_agree_with_openvino_on_the_same_file(tiny_onnx: Path, rng: np.random.Generator) -> None:
    import openvino as ov

    compiled = ov.Core().compile_model(str(tiny_onnx), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    backend = load(tiny_onnx)
    for image in tiny_images(rng, 4):
        np.testing.assert_allclose(backend.infer([image])[0], compiled([image])[0], atol=1e-5)


def test_threads_are_set_explicitly_and_reported(tiny_onnx: Path) -> None:
    one = load(tiny_onnx, threads=1)
    assert one._session.get_session_options().intra_op_num_threads == 1
    assert one.runs_on.details["threads"] == "1"
    default = load(tiny_onnx)
    cores = len(os.sched_getaffinity(0))
    assert default._session.get_session_options().intra_op_num_threads == cores
    assert default.runs_on.details["threads"] == str(cores)


@pytest.mark.parametrize(
    ("device", "provider", "package"),
    [
        ("CUDA", CUDA, "onnxruntime-gpu"),
        ("CUDA:1", CUDA, "onnxruntime-gpu"),
        ("TENSORRT", TENSORRT, "onnxruntime-gpu"),
        ("OPENVINO:GPU.0", OPENVINO, "onnxruntime-openvino"),
    ],
)
def test_accelerator_missing_from_this_build_is_refused_by_name(
    tiny_onnx: Path, device: str, provider: str, package: str
) -> None:
    if provider in ort.get_available_providers():
        pytest.skip(f"this onnxruntime build has {provider}")
    with pytest.raises(BackendUnavailableError) as error:
        load(tiny_onnx, device=device)
    assert provider in str(error.value)
    assert package in str(error.value)
    assert device in str(error.value)


def test_a_dropped_provider_is_reported_not_claimed(tiny_onnx: Path) -> None:
    """ONNX Runtime drops a provider it cannot start (here: CUDA on a CPU build) and runs on the CPU."""
    options = OnnxRuntimeOptions(device="CUDA")
    chain = [name for name, _ in build_providers(options, quantized=False)]
    with pytest.warns(UserWarning, match=CUDA):
        session = ort.InferenceSession(str(tiny_onnx), providers=chain, enable_fallback=0)
    active = session.get_providers()
    assert CUDA not in active

    runs_on = describe_runs_on(options, chain, active, "fp32", threads=2, io_binding=False)
    assert runs_on.device == "CPU"
    assert "CUDA" not in runs_on.details["providers"]
    assert f"{CUDA} did not start" in runs_on.details["fallback"]
    assert "fallback: CUDA requested" in runs_on.device_name


def test_tensorrt_falling_back_to_cuda_reports_cuda_and_its_precision() -> None:
    options = OnnxRuntimeOptions(device="TENSORRT:0", fp16=True)
    runs_on = describe_runs_on(options, [TENSORRT, CUDA, CPU], [CUDA, CPU], "fp32", threads=4, io_binding=True)
    assert runs_on.device == "CUDA:0"
    assert runs_on.details["engine_cache_dir"].endswith("tensorrt")
    assert TENSORRT in runs_on.details["fallback"]
    float_model = ModelFacts(quantized=False, float16=False)
    assert effective_precision(float_model, CUDA, trt_fp16=True, openvino_device=None) == "fp32"
    assert effective_precision(float_model, TENSORRT, trt_fp16=True, openvino_device=None) == "fp16"
    assert effective_precision(float_model, TENSORRT, trt_fp16=False, openvino_device=None) == "fp32"
    assert effective_precision(float_model, OPENVINO, trt_fp16=False, openvino_device="GPU.0") == "fp16"
    assert effective_precision(float_model, OPENVINO, trt_fp16=False, openvino_device="CPU") == "fp32"
    assert effective_precision(ModelFacts(True, False), TENSORRT, trt_fp16=True, openvino_device=None) == "int8"


def test_dynamic_batch_runs_batches_of_one_and_three(tmp_path: Path, rng: np.random.Generator) -> None:
    backend = load(build_tiny_classifier_onnx(tmp_path / "dynamic.onnx", batch="N"))
    assert backend.inputs[0].shape == (None, 3, 32, 32)
    assert backend.outputs[0].shape == (None, 10)
    batch = np.concatenate(list(tiny_images(rng, 3)))
    (single,) = backend.infer([batch[:1]])
    (three,) = backend.infer([batch])
    assert single.shape == (1, 10) and three.shape == (3, 10)
    np.testing.assert_allclose(three[:1], single, atol=1e-6)
    np.testing.assert_allclose(three[2:], backend.infer([batch[2:]])[0], atol=1e-6)


def test_int8_qdq_model_reports_int8_and_stays_close_to_fp32(
    tiny_onnx: Path, tiny_int8_onnx: Path, rng: np.random.Generator
) -> None:
    int8, fp32 = load(tiny_int8_onnx), load(tiny_onnx)
    assert int8.runs_on.precision == "int8"
    assert [(t.name, t.dtype) for t in int8.inputs] == [("image", "float32")]
    batch = tiny_images(rng, 48)
    quantized = np.concatenate([int8.infer([image])[0] for image in batch])
    reference = np.concatenate([fp32.infer([image])[0] for image in batch])
    assert not np.array_equal(quantized, reference)
    # The int8 result is the QDQ specification's on every CPU (test_int8_numerics), so how far it lies from
    # fp32 is the model's and its calibration's doing: for a typical image, the rounding at the output's
    # quantizer and what earlier steps pass on stays within two output steps. Images outside the 16
    # calibration samples' range clip, hence the median.
    step = scale_of(tiny_int8_onnx, "probabilities")
    assert np.median(np.abs(quantized - reference).max(axis=1)) <= 2 * step
    assert (quantized.argmax(1) == reference.argmax(1)).mean() >= 0.9


def test_model_precision_is_read_with_and_without_onnx(tiny_onnx: Path, tiny_int8_onnx: Path, fp16_onnx: Path) -> None:
    assert inspect_model(tiny_int8_onnx) == ModelFacts(quantized=True, float16=False)
    assert inspect_model(tiny_onnx) == ModelFacts(quantized=False, float16=False)
    assert inspect_model(fp16_onnx) == ModelFacts(quantized=False, float16=True)
    assert scan_model_bytes(tiny_int8_onnx).quantized
    assert not scan_model_bytes(tiny_onnx).quantized


def test_without_onnx_installed_the_int8_model_still_reports_int8(tiny_int8_onnx: Path) -> None:
    script = (
        "import sys; sys.modules['onnx'] = None\n"
        "from pathlib import Path\n"
        "from edge_runtime.backends import load_backend\n"
        "from edge_runtime.backends.base import ModelSource\n"
        "from edge_runtime.package.manifest import ModelFormat, Precision\n"
        f"src = ModelSource(Path({str(tiny_int8_onnx)!r}), ModelFormat.ONNX, Precision.INT8, 'int8', '')\n"
        "print(load_backend('onnxruntime', src, {}).runs_on.precision)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    assert result.stdout.strip() == "int8"


def test_fp16_model_reports_fp16(fp16_onnx: Path) -> None:
    backend = load(fp16_onnx)
    assert backend.runs_on.precision == "fp16"
    assert backend.inputs[0].dtype == "float16"
    (y,) = backend.infer([np.zeros((1, 4), dtype=np.float16)])
    assert y.dtype == np.float16 and y.tolist() == [[1, 2, 3, 4]]


def test_running_lower_than_asked_is_refused_higher_only_warns(
    tiny_onnx: Path, tiny_int8_onnx: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(BackendUnavailableError, match="runs at int8, lower than the fp32 asked for"):
        load(tiny_int8_onnx, precision="fp32")
    with caplog.at_level(logging.WARNING, logger="edge_runtime.backends.onnxruntime.backend"):
        backend = load(tiny_onnx, precision="fp16")
    assert backend.runs_on.precision == "fp32"
    assert "not the fp16 asked for" in caplog.text


def test_io_binding_path_gives_the_same_outputs(tiny_onnx: Path, rng: np.random.Generator) -> None:
    bound, plain = load(tiny_onnx, io_binding=True), load(tiny_onnx)
    assert bound.runs_on.details["io_binding"] == "on"
    for image in tiny_images(rng, 3):
        np.testing.assert_array_equal(bound.infer([image])[0], plain.infer([image])[0])


@pytest.mark.parametrize("io_binding", [False, True])
def test_async_runner_returns_every_result_with_its_userdata(
    tiny_onnx: Path, rng: np.random.Generator, io_binding: bool
) -> None:
    backend = load(tiny_onnx, io_binding=io_binding)
    batch = tiny_images(rng, 12)
    results: dict[int, np.ndarray] = {}
    lock = threading.Lock()

    def on_result(userdata: Any, outputs: list[np.ndarray] | None, error: BaseException | None) -> None:
        assert error is None and outputs is not None
        with lock:
            results[userdata] = outputs[0]

    runner = backend.async_runner(on_result, max_in_flight=3)
    assert runner.capacity == 3
    for index, image in enumerate(batch):
        runner.submit([image], userdata=index)
    runner.close()
    assert sorted(results) == list(range(12))
    for index, image in enumerate(batch):
        np.testing.assert_allclose(results[index], backend.infer([image])[0], atol=1e-6)
    assert backend.async_runner(on_result).capacity == 2
    assert load(tiny_onnx, max_in_flight=4).async_runner(on_result).capacity == 4


def test_try_submit_starts_only_while_a_worker_is_free_and_never_waits(
    tiny_onnx: Path, rng: np.random.Generator
) -> None:
    """A worker's slot is busy until its callback returns: callbacks that wait keep both slots busy."""
    backend = load(tiny_onnx)
    images = tiny_images(rng, 3)
    release = threading.Event()
    results: dict[int, np.ndarray] = {}

    def on_result(userdata: Any, outputs: list[np.ndarray] | None, error: BaseException | None) -> None:
        release.wait(30)
        assert outputs is not None
        results[userdata] = outputs[0]

    runner = backend.async_runner(on_result, max_in_flight=2)
    try:
        assert runner.try_submit([images[0]], userdata=0) and runner.try_submit([images[1]], userdata=1)
        assert not runner.try_submit([images[2]], userdata=2)  # returns at once: both slots are busy
    finally:
        release.set()
        runner.close()
    assert sorted(results) == [0, 1]
    for index in (0, 1):
        np.testing.assert_allclose(results[index], backend.infer([images[index]])[0], atol=1e-6)


@pytest.mark.parametrize("io_binding", [False, True])
def test_async_runner_reports_bad_inputs_through_the_callback(tiny_onnx: Path, io_binding: bool) -> None:
    errors: list[BaseException | None] = []
    runner = load(tiny_onnx, io_binding=io_binding).async_runner(
        lambda userdata, outputs, error: errors.append(error), max_in_flight=1
    )
    runner.submit([np.zeros((1, 3, 16, 16), dtype=np.float32)])
    runner.close()
    assert len(errors) == 1 and isinstance(errors[0], ModelMismatchError)


@pytest.mark.parametrize("io_binding", [False, True])
def test_wrong_inputs_raise_a_mismatch_naming_the_expected_input(tiny_onnx: Path, io_binding: bool) -> None:
    backend = load(tiny_onnx, io_binding=io_binding)
    with pytest.raises(ModelMismatchError, match=r"image \[1, 3, 32, 32\] float32; got 2 inputs"):
        backend.infer([np.zeros((1, 3, 32, 32), np.float32)] * 2)
    for wrong in (np.zeros((1, 3, 16, 16), np.float32), np.zeros((1, 3, 32, 32), np.float64)):
        with pytest.raises(ModelMismatchError, match=r"the model expects image \[1, 3, 32, 32\] float32; "):
            backend.infer([wrong])


@pytest.mark.parametrize("content", [b"", b"this is not a protobuf \x00\xff\x12" * 10])
def test_corrupt_file_raises_model_load_error_with_path(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError) as error:
        load(path)
    message = str(error.value)
    assert str(path) in message and "\n" not in message
    assert "onnxruntime cannot load" in message


def test_missing_file_raises_model_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no such file"):
        load(tmp_path / "absent.onnx")


def test_invalid_graph_raises_model_load_error(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["missing_input"], ["y"])],
        "broken",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    path = tmp_path / "invalid.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(ModelLoadError, match=r"invalid\.onnx"):
        load(path)


def test_probe_lists_what_this_build_offers() -> None:
    status = OnnxRuntimeBackend.probe()
    assert status.available and status.version == ort.__version__
    assert "CPU" in status.devices and status.device_names["CPU"]
    assert ("CUDA" in status.devices) == (CUDA in ort.get_available_providers())
    assert status.reason == ""


def test_gpu_names_are_empty_without_a_cuda_provider() -> None:
    if CUDA not in ort.get_available_providers():
        assert nvidia_device_names() == []
    else:
        assert all(isinstance(name, str) and name for name in nvidia_device_names())
    assert cuda_driver_device_names("libcuda-that-does-not-exist.so.9") == []
    libc = ctypes.util.find_library("c")
    assert libc is not None
    assert cuda_driver_device_names(libc) == []


def test_importing_the_backend_does_not_import_onnxruntime() -> None:
    script = (
        "import sys\n"
        "import edge_runtime.backends.onnxruntime.backend as module\n"
        "assert 'onnxruntime' not in sys.modules, 'imported at module import'\n"
        "status = module.OnnxRuntimeBackend.probe()\n"
        "assert 'onnxruntime' in sys.modules and status.available\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=REPO, check=True)
