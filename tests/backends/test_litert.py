"""LiteRT backend against the real ai-edge-litert interpreter, on the bundled BlazeFace model.

Delegates this box lacks (Edge TPU, GPU, external plugins) are exercised through their real failure
paths: the real loader meeting a missing or wrong library, and the fallback or refusal that follows.
"""

from __future__ import annotations

import ctypes.util
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import cv2
import flatbuffers
import numpy as np
import pytest

from edge_runtime.backends import load_backend, make_options
from edge_runtime.backends.base import BackendOptions, ModelSource, Quantization
from edge_runtime.backends.litert.backend import LiteRtBackend, LiteRtOptions, edgetpu_library, import_interpreter
from edge_runtime.errors import BackendUnavailableError, ConfigError, ModelLoadError, ModelMismatchError
from edge_runtime.package.manifest import ModelFormat, Precision

NUMPY1_TFLITE_RUNTIME = Path(__file__).parents[1] / "fixtures" / "litert" / "numpy1_tflite_runtime"
HAS_LIBEDGETPU = ctypes.util.find_library("edgetpu") is not None
needs_no_libedgetpu = pytest.mark.skipif(
    HAS_LIBEDGETPU, reason="covers boxes without the Edge TPU runtime; this one has libedgetpu"
)


def source_for(path: Path, target: str | None = None) -> ModelSource:
    return ModelSource(path, ModelFormat.TFLITE, Precision.FP32, "tflite/fp32", "sha", target)


@pytest.fixture(scope="module")
def face_tflite(face_package_dir: Path) -> Path:
    return face_package_dir / "tflite" / "fp32" / "model.tflite"


@pytest.fixture(scope="module")
def face(face_tflite: Path) -> LiteRtBackend:
    return LiteRtBackend(source_for(face_tflite), LiteRtOptions())


@pytest.fixture(scope="module")
def face_input(astronaut_bgr: np.ndarray) -> np.ndarray:
    rgb = cv2.cvtColor(cv2.resize(astronaut_bgr, (128, 128)), cv2.COLOR_BGR2RGB)
    return ((rgb.astype(np.float32) - 127.5) / 127.5)[np.newaxis]


def run_python(code: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def os_threads() -> set[str]:
    """Ids of this process's OS threads; comparing sets ignores threads other code ends meanwhile."""
    return {task.name for task in Path("/proc/self/task").iterdir()}


def test_face_model_specs_and_runs_on(face: LiteRtBackend) -> None:
    assert [(s.name, s.shape, s.dtype) for s in face.inputs] == [("input", (1, 128, 128, 3), "float32")]
    assert [(s.name, s.shape, s.dtype) for s in face.outputs] == [
        ("regressors", (1, 896, 16), "float32"),
        ("classificators", (1, 896, 1), "float32"),
    ]
    assert all(s.quantization is None for s in face.inputs + face.outputs)
    runs_on = face.runs_on
    assert (runs_on.backend, runs_on.device, runs_on.precision) == ("litert", "cpu", "fp32")
    assert runs_on.device_name and runs_on.device_name != "cpu"
    assert runs_on.details["library"].startswith("ai_edge_litert ")
    assert runs_on.details["delegate"] == "xnnpack"
    assert runs_on.details["weights"] == "fp16"  # MediaPipe stores this fp32 model's weights as float16
    assert "fallback" not in runs_on.details


def test_finds_the_face_and_agrees_with_openvino(
    face: LiteRtBackend, face_tflite: Path, face_input: np.ndarray
) -> None:
    import openvino as ov

    regressors, scores = face.infer([face_input])
    assert regressors.shape == (1, 896, 16) and scores.shape == (1, 896, 1)
    assert 1 / (1 + np.exp(-scores.max())) > 0.9  # the astronaut's face

    compiled = ov.Core().compile_model(ov.Core().read_model(face_tflite), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    reference = compiled([face_input])
    by_name = {port.get_any_name(): reference[port] for port in compiled.outputs}
    np.testing.assert_allclose(regressors, by_name["regressors"], atol=1e-3)
    np.testing.assert_allclose(scores, by_name["classificators"], atol=1e-3)


def test_outputs_are_copies_that_survive_the_next_call(face: LiteRtBackend, face_input: np.ndarray) -> None:
    first = face.infer([face_input])[1]
    kept = first.copy()
    face.infer([np.zeros_like(face_input)])
    np.testing.assert_array_equal(first, kept)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts OS threads through Linux procfs")
def test_threads_are_set_and_default_to_the_cores_this_process_may_use(face_tflite: Path) -> None:
    """XNNPACK starts threads - 1 workers beside the calling thread, so the process shows what was set."""
    cores = len(os.sched_getaffinity(0))
    for threads, expected in ((1, "1"), (3, "3"), (None, str(cores))):
        before = os_threads()
        backend = LiteRtBackend(source_for(face_tflite), LiteRtOptions(threads=threads))
        assert len(os_threads() - before) == int(expected) - 1
        assert backend.runs_on.details["threads"] == expected
        backend.close()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts OS threads through Linux procfs")
def test_no_default_delegate_runs_the_same_model_without_xnnpack(
    face: LiteRtBackend, face_tflite: Path, face_input: np.ndarray
) -> None:
    before = os_threads()
    plain = LiteRtBackend(source_for(face_tflite), LiteRtOptions(delegate="none", threads=3))
    assert not os_threads() - before  # XNNPACK would have started its 2 workers while loading
    assert plain.runs_on.details["delegate"] == "none" and plain.runs_on.device == "cpu"
    for ours, theirs in zip(plain.infer([face_input]), face.infer([face_input]), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-4)  # other kernels, same maths


@needs_no_libedgetpu
def test_edgetpu_falls_back_to_xnnpack_with_the_reason(face_tflite: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="edge_runtime.backends.litert.backend"):
        backend = LiteRtBackend(source_for(face_tflite), LiteRtOptions(delegate="edgetpu", edgetpu_device="usb"))
    assert backend.runs_on.device == "cpu"
    assert backend.runs_on.details["delegate"] == "xnnpack"
    assert "edgetpu" in backend.runs_on.details["fallback"]
    assert edgetpu_library() in backend.runs_on.details["fallback"]
    assert any("libedgetpu" in record.getMessage() for record in caplog.records)


@needs_no_libedgetpu
def test_edgetpu_without_fallback_is_unavailable(face_tflite: Path) -> None:
    with pytest.raises(BackendUnavailableError, match=r"edgetpu.*libedgetpu"):
        LiteRtBackend(source_for(face_tflite), LiteRtOptions(delegate="edgetpu", fallback=[]))


@needs_no_libedgetpu
@pytest.mark.parametrize("target", [None, "edgetpu"])
def test_edgetpu_models_are_refused_without_an_edgetpu(face_tflite: Path, tmp_path: Path, target: str | None) -> None:
    path = face_tflite if target else tmp_path / "x_edgetpu.tflite"
    if not target:
        shutil.copy(face_tflite, path)
    source = source_for(path, target)
    with pytest.raises(BackendUnavailableError, match="compiled for the Edge TPU"):
        LiteRtBackend(source, LiteRtOptions())  # asks for the CPU
    with pytest.raises(BackendUnavailableError, match=r"libedgetpu.*never run on the CPU"):
        LiteRtBackend(source, LiteRtOptions(delegate="edgetpu"))  # fallback to xnnpack is not taken


def test_external_delegate_that_cannot_load_falls_back(face_tflite: Path, tmp_path: Path) -> None:
    missing = str(tmp_path / "no_such_delegate.so")
    backend = LiteRtBackend(source_for(face_tflite), LiteRtOptions(delegate="external", delegate_library=missing))
    assert backend.runs_on.details["delegate"] == "xnnpack"
    assert missing in backend.runs_on.details["fallback"]


def test_a_library_that_is_no_delegate_plugin_falls_back(face_tflite: Path) -> None:
    libm = ctypes.util.find_library("m")
    assert libm is not None
    backend = LiteRtBackend(source_for(face_tflite), LiteRtOptions(delegate="gpu", delegate_library=libm))
    assert "tflite_plugin_create_delegate" in backend.runs_on.details["fallback"]
    with pytest.raises(BackendUnavailableError, match=r"delegate gpu .*tflite_plugin_create_delegate"):
        LiteRtBackend(source_for(face_tflite), LiteRtOptions(delegate="gpu", delegate_library=libm, fallback=[]))


def test_option_validation() -> None:
    assert LiteRtOptions().fallback == ["xnnpack", "none"]
    for device in ("usb", "usb:1", "pci:0", ":0"):
        assert LiteRtOptions(edgetpu_device=device).edgetpu_device == device
    with pytest.raises(ConfigError, match="edgetpu_device"):
        make_options("litert", {"edgetpu_device": "tpu0"})
    with pytest.raises(ConfigError, match="delegate_library"):
        make_options("litert", {"delegate": "external"})
    with pytest.raises(ConfigError, match="delegate"):
        make_options("litert", {"delegate": "npu"})


def test_registry_loads_it(face_tflite: Path) -> None:
    backend = load_backend("litert", source_for(face_tflite), {"threads": 1})
    assert isinstance(backend, LiteRtBackend) and backend.runs_on.details["threads"] == "1"


def test_plain_backend_options_are_taken_with_litert_defaults(face_tflite: Path) -> None:
    backend = LiteRtBackend(source_for(face_tflite), BackendOptions(threads=1))
    assert backend.runs_on.details["threads"] == "1" and backend.runs_on.details["delegate"] == "xnnpack"


def test_probe_reports_the_library_and_the_cpu() -> None:
    status = LiteRtBackend.probe()
    assert status.available and status.version
    assert "cpu" in status.devices and status.device_names["cpu"]


def test_interpreter_import_tries_candidates_in_order() -> None:
    library = import_interpreter(("no_such_litert_module.interpreter", "ai_edge_litert.interpreter"))
    assert library.name == "ai_edge_litert"
    assert len(library.passed_over) == 1 and "no_such_litert_module" in library.passed_over[0]
    with pytest.raises(BackendUnavailableError) as raised:
        import_interpreter(("no_such_a.interpreter", "no_such_b.interpreter"))
    message = str(raised.value)
    assert 0 <= message.index("no_such_a") < message.index("no_such_b")
    assert "pip install ai-edge-litert" in message


def test_reason_names_numpy_1_builds_when_ai_edge_litert_is_absent() -> None:
    code = (
        "import sys\n"
        "sys.modules['ai_edge_litert'] = None\n"
        "sys.modules['tensorflow'] = None\n"
        "import json\n"
        "from edge_runtime.backends.litert.backend import LiteRtBackend\n"
        "status = LiteRtBackend.probe()\n"
        "print(json.dumps([status.available, status.reason]))\n"
    )
    result = run_python(code, NUMPY1_TFLITE_RUNTIME)
    assert result.returncode == 0, result.stderr
    available, reason = json.loads(result.stdout.strip().splitlines()[-1])
    assert not available
    assert "tflite_runtime was built for NumPy 1.x; install ai-edge-litert or numpy<2" in reason
    assert reason.index("ai_edge_litert") < reason.index("tflite_runtime") < reason.index("tensorflow")


def test_loading_without_any_interpreter_is_a_clear_error(face_tflite: Path) -> None:
    code = (
        "import sys\n"
        "for name in ('ai_edge_litert', 'tflite_runtime', 'tensorflow'):\n"
        "    sys.modules[name] = None\n"
        "from pathlib import Path\n"
        "from edge_runtime.backends import load_backend\n"
        "from edge_runtime.backends.base import ModelSource\n"
        "from edge_runtime.errors import BackendUnavailableError\n"
        "from edge_runtime.package.manifest import ModelFormat, Precision\n"
        f"source = ModelSource(Path({str(face_tflite)!r}), ModelFormat.TFLITE, Precision.FP32, 'v', 's')\n"
        "try:\n"
        "    load_backend('litert', source)\n"
        "except BackendUnavailableError as error:\n"
        "    print('unavailable:', error)\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("unavailable: no LiteRT interpreter is usable (ai_edge_litert")


def test_importing_the_backend_does_not_import_litert() -> None:
    code = (
        "import sys, edge_runtime.backends.litert.backend\n"
        "libraries = ('ai_edge_litert', 'tflite_runtime', 'tensorflow')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in libraries))\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_async_runner_returns_every_result_with_its_userdata(face: LiteRtBackend, face_input: np.ndarray) -> None:
    frames = [face_input * scale for scale in np.linspace(0.2, 1.0, 8, dtype=np.float32)]
    expected = [face.infer([frame]) for frame in frames]
    results: dict[Any, Any] = {}
    lock = threading.Lock()

    def on_result(userdata: Any, outputs: list[np.ndarray] | None, error: BaseException | None) -> None:
        with lock:
            results[userdata] = outputs if error is None else error

    runner = face.async_runner(on_result, max_in_flight=3)
    assert runner.capacity == 3
    for i, frame in enumerate(frames):
        runner.submit([frame], userdata=("frame", i))
    runner.submit([np.zeros((1, 64, 64, 3), np.float32)], userdata="wrong size")
    runner.close()
    with pytest.raises(RuntimeError, match="closed"):  # no worker is left: it must not wait forever
        runner.submit([frames[0]], userdata="late")
    assert set(results) == {("frame", i) for i in range(8)} | {"wrong size"}
    for i, outputs in enumerate(expected):
        for got, want in zip(results[("frame", i)], outputs, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)
    assert isinstance(results["wrong size"], ModelMismatchError)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts OS threads through Linux procfs")
def test_async_interpreters_share_the_threads(face_tflite: Path) -> None:
    backend = LiteRtBackend(source_for(face_tflite), LiteRtOptions(threads=4))
    before = os_threads()
    runner = backend.async_runner(lambda *_: None, max_in_flight=2)
    assert len(os_threads() - before) == 2 + 2 * (2 - 1)  # a runner thread and 2-thread XNNPACK per interpreter
    runner.close()


def test_wrong_inputs_are_named_errors(face: LiteRtBackend, face_input: np.ndarray) -> None:
    with pytest.raises(ModelMismatchError, match=r"model\.tflite takes 1 inputs, got 2"):
        face.infer([face_input, face_input])
    with pytest.raises(ModelMismatchError, match="input does not fit"):
        face.infer([face_input.astype(np.float64)])
    with pytest.raises(ModelMismatchError, match="input does not fit"):
        face.infer([face_input[:, :64]])


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "missing"])
def test_broken_model_files_are_load_errors(face_tflite: Path, tmp_path: Path, damage: str) -> None:
    path = tmp_path / f"{damage}.tflite"
    content = {"truncated": face_tflite.read_bytes()[:50_000], "garbage": b"not a model\n" * 100, "empty": b""}
    if damage in content:
        path.write_bytes(content[damage])
    options = LiteRtOptions(delegate="external", delegate_library=str(tmp_path / "missing_delegate.so"))
    with pytest.raises(ModelLoadError, match=damage):  # after the delegate failed, the CPU names the file
        LiteRtBackend(source_for(path), options)


def build_tflite(path: Path, input_type: int, input_quantization: tuple[float, int] | None, dynamic: bool) -> Path:
    """A one-op model with the real TFLite schema: ADD(x, x) for float input, DEQUANTIZE(x) for int8."""
    from ai_edge_litert import schema_py_generated as schema

    def tensor(name: str, tensor_type: int, quantization: tuple[float, int] | None = None) -> Any:
        t = schema.TensorT()
        t.name, t.type, t.buffer, t.shape = name, tensor_type, 0, [1, 4]
        t.shapeSignature = [-1, 4] if dynamic else [1, 4]
        if quantization is not None:
            t.quantization = schema.QuantizationParametersT()
            t.quantization.scale, t.quantization.zeroPoint = [quantization[0]], [quantization[1]]
        return t

    quantized = input_quantization is not None
    code = schema.OperatorCodeT()
    code.builtinCode = schema.BuiltinOperator.DEQUANTIZE if quantized else schema.BuiltinOperator.ADD
    code.deprecatedBuiltinCode, code.version = code.builtinCode, 1
    operator = schema.OperatorT()
    operator.opcodeIndex, operator.inputs, operator.outputs = 0, [0] if quantized else [0, 0], [1]
    if not quantized:
        operator.builtinOptionsType, operator.builtinOptions = schema.BuiltinOptions.AddOptions, schema.AddOptionsT()
    graph = schema.SubGraphT()
    graph.tensors = [tensor("x", input_type, input_quantization), tensor("y", schema.TensorType.FLOAT32)]
    graph.inputs, graph.outputs, graph.operators = [0], [1], [operator]
    model = schema.ModelT()
    model.version, model.operatorCodes, model.subgraphs, model.buffers = 3, [code], [graph], [schema.BufferT()]
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path.write_bytes(builder.Output())
    return path


def test_quantized_input_spec_and_precision(tmp_path: Path) -> None:
    from ai_edge_litert.schema_py_generated import TensorType

    path = build_tflite(tmp_path / "dequantize.tflite", TensorType.INT8, (0.5, -1), dynamic=False)
    backend = LiteRtBackend(source_for(path), LiteRtOptions())
    assert backend.inputs[0].dtype == "int8"
    assert backend.inputs[0].quantization == Quantization(0.5, -1)
    assert backend.runs_on.precision == "int8"
    (out,) = backend.infer([np.array([[-1, 1, 3, 127]], np.int8)])
    np.testing.assert_allclose(out, [[0.0, 1.0, 2.0, 64.0]])


def test_dynamic_batch_resizes_only_when_the_shape_changes(tmp_path: Path) -> None:
    from ai_edge_litert.schema_py_generated import TensorType

    path = build_tflite(tmp_path / "add.tflite", TensorType.FLOAT32, None, dynamic=True)
    backend = LiteRtBackend(source_for(path), LiteRtOptions())
    assert backend.inputs[0].shape == (None, 4)
    for batch in (1, 3, 3, 2):
        x = np.arange(batch * 4, dtype=np.float32).reshape(batch, 4)
        (out,) = backend.infer([x])
        np.testing.assert_array_equal(out, 2 * x)


def test_a_model_exported_with_a_batch_of_one_takes_batches_when_asked(tmp_path: Path) -> None:
    from ai_edge_litert.schema_py_generated import TensorType

    path = build_tflite(tmp_path / "add.tflite", TensorType.FLOAT32, None, dynamic=False)
    assert LiteRtBackend(source_for(path), LiteRtOptions()).inputs[0].shape == (1, 4)
    backend = LiteRtBackend(source_for(path), LiteRtOptions(dynamic_batch=True))
    assert backend.inputs[0].shape == (None, 4) and backend.outputs[0].shape == (None, 4)
    results: list[np.ndarray] = []
    runner = backend.async_runner(lambda userdata, outputs, error: results.append(outputs[0]), max_in_flight=2)
    for batch in (3, 1):
        x = np.arange(batch * 4, dtype=np.float32).reshape(batch, 4)
        np.testing.assert_array_equal(backend.infer([x])[0], 2 * x)
        runner.submit([x])
    runner.close()
    assert sorted(len(r) for r in results) == [1, 3]
