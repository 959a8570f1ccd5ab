"""The OpenVINO backend against the real OpenVINO runtime on this box's CPU."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from model_builders import build_tiny_classifier_onnx

from edge_runtime.backends import load_backend
from edge_runtime.backends.base import ModelSource
from edge_runtime.backends.openvino.backend import (
    EmbeddedPreprocessing,
    OpenVinoBackend,
    OpenVinoOptions,
    compile_config,
    device_capabilities,
    make_static,
)
from edge_runtime.backends.openvino.devices import openvino_core
from edge_runtime.backends.openvino.runner import shareable
from edge_runtime.errors import BackendUnavailableError, ConfigError, ModelLoadError, ModelMismatchError
from edge_runtime.package.manifest import ModelFormat, Precision, read_manifest


def source(path: Path, precision: Precision = Precision.FP32) -> ModelSource:
    formats = {".xml": ModelFormat.OPENVINO, ".onnx": ModelFormat.ONNX, ".tflite": ModelFormat.TFLITE}
    fmt = formats[path.suffix]
    return ModelSource(path, fmt, precision, f"{fmt.value}/{precision.value}", "0" * 64)


@pytest.fixture(scope="module")
def face_ir(face_package_dir: Path) -> ModelSource:
    return source(face_package_dir / "openvino" / "fp32" / "model.xml")


@pytest.fixture(scope="module")
def face_input(astronaut_bgr: np.ndarray) -> np.ndarray:
    """The face detector's input prepared on the host: stretch to 128x128, RGB, (x - 127.5) / 127.5."""
    resized = cv2.resize(astronaut_bgr, (128, 128), interpolation=cv2.INTER_LINEAR)
    rgb = cv2.cvtColor(resized, cv2.COLOR_BGR2RGB).astype(np.float32)
    return ((rgb - 127.5) / 127.5)[np.newaxis]


def test_importing_the_backend_does_not_import_openvino() -> None:
    code = "import sys, edge_runtime.backends.openvino.backend; print('openvino' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_probe_reports_version_devices_and_names() -> None:
    status = OpenVinoBackend.probe()
    assert status.available and status.backend == "openvino"
    assert status.version and status.version[:4].isdigit()
    assert "CPU" in status.devices
    assert status.device_names["CPU"] and status.device_names["CPU"] != "CPU"
    capabilities = device_capabilities()
    assert set(capabilities) == set(status.devices)
    assert "FP32" in capabilities["CPU"]


def test_ir_and_onnx_of_the_same_model_agree(tiny_openvino: Path, tiny_onnx: Path, rng: np.random.Generator) -> None:
    ir = load_backend("openvino", source(tiny_openvino))
    onnx = load_backend("openvino", source(tiny_onnx))
    for backend in (ir, onnx):
        assert [(s.name, s.shape, s.dtype) for s in backend.inputs] == [("image", (1, 3, 32, 32), "float32")]
        assert [(s.name, s.shape, s.dtype) for s in backend.outputs] == [("probabilities", (1, 10), "float32")]
    image = rng.random((1, 3, 32, 32), dtype=np.float32)
    (from_ir,), (from_onnx,) = ir.infer([image]), onnx.infer([image])
    assert from_ir.shape == (1, 10)
    np.testing.assert_allclose(from_ir, from_onnx, atol=1e-6)
    assert from_ir.sum() == pytest.approx(1.0, abs=1e-5)


def test_face_detector_ir_and_tflite_read_by_openvino_agree(
    face_ir: ModelSource, face_package_dir: Path, face_input: np.ndarray
) -> None:
    ir = load_backend("openvino", face_ir)
    tflite = load_backend("openvino", source(face_package_dir / "tflite" / "fp32" / "model.tflite"))
    assert [s.name for s in tflite.outputs] == ["regressors", "classificators"]
    for from_ir, from_tflite in zip(ir.infer([face_input]), tflite.infer([face_input]), strict=True):
        np.testing.assert_allclose(from_ir, from_tflite, atol=1e-4)
    scores = ir.infer([face_input])[1]
    assert scores.max() > 1.0  # the astronaut's face is found with a confident logit


def test_default_precision_is_fp32_and_bf16_only_when_asked(face_ir: ModelSource, face_input: np.ndarray) -> None:
    default = load_backend("openvino", face_ir)
    explicit = load_backend("openvino", face_ir, {"precision": "fp32"})
    assert default.runs_on.precision == "fp32"
    reference = explicit.infer([face_input])
    for got, want in zip(default.infer([face_input]), reference, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    if "BF16" not in device_capabilities()["CPU"]:
        with pytest.raises(ConfigError, match="cannot run bf16"):
            load_backend("openvino", face_ir, {"precision": "bf16"})
        return
    bf16 = load_backend("openvino", face_ir, {"precision": "bf16"})
    assert bf16.runs_on.precision == "bf16"
    largest = max(
        float(np.abs(got - want).max()) for got, want in zip(bf16.infer([face_input]), reference, strict=True)
    )
    assert largest > 0.05


def test_precision_the_cpu_lacks_is_a_config_error(face_ir: ModelSource) -> None:
    if "FP16" in device_capabilities()["CPU"]:
        assert load_backend("openvino", face_ir, {"precision": "fp16"}).runs_on.precision == "fp16"
        return
    with pytest.raises(ConfigError, match=r"CPU cannot run fp16.*OPTIMIZATION_CAPABILITIES"):
        load_backend("openvino", face_ir, {"precision": "fp16"})


def test_int8_variant_reports_int8_with_its_float_part(
    tiny_int8_onnx: Path, tiny_onnx: Path, rng: np.random.Generator
) -> None:
    quantized = load_backend("openvino", source(tiny_int8_onnx, Precision.INT8))
    assert quantized.runs_on.precision == "int8"
    assert quantized.runs_on.details["float_precision"] == "fp32"
    plain = load_backend("openvino", source(tiny_onnx))
    assert plain.runs_on.precision == "fp32" and "float_precision" not in plain.runs_on.details
    image = rng.random((1, 3, 32, 32), dtype=np.float32)
    (got,), (want,) = quantized.infer([image]), plain.infer([image])
    np.testing.assert_allclose(got, want, atol=0.02)
    with pytest.raises(ConfigError, match="int8 needs an int8 model variant"):
        load_backend("openvino", source(tiny_onnx), {"precision": "int8"})


def test_virtual_devices_get_precision_and_threads_per_device() -> None:
    options = OpenVinoOptions(device="AUTO:CPU", threads=1, hint="throughput", max_in_flight=3)
    config = compile_config(openvino_core(), ["CPU"], {"CPU": Precision.FP32}, options, virtual=True)
    assert config["PERFORMANCE_HINT"] == "THROUGHPUT"
    assert config["PERFORMANCE_HINT_NUM_REQUESTS"] == "3"
    assert config["DEVICE_PROPERTIES"]["CPU"] == {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}
    with pytest.raises(ConfigError, match="use the option precision"):
        compile_config(
            openvino_core(),
            ["CPU"],
            {"CPU": Precision.FP32},
            OpenVinoOptions(extra_properties={"INFERENCE_PRECISION_HINT": "f32"}),
            False,
        )


def test_auto_runs_on_cpu_and_reports_the_execution_device(face_ir: ModelSource) -> None:
    backend = load_backend("openvino", face_ir, {"device": "AUTO:CPU", "threads": 1})
    assert backend.runs_on.device == "AUTO:CPU"
    assert backend.runs_on.details["execution_devices"] == "CPU"
    assert backend.runs_on.device_name == OpenVinoBackend.probe().device_names["CPU"]
    assert backend.runs_on.precision == "fp32"
    assert backend.runs_on.details["threads"] == "1"


def test_unknown_device_names_the_device_and_what_is_available(face_ir: ModelSource) -> None:
    with pytest.raises(BackendUnavailableError, match=r"'GPU\.3'.*OpenVINO sees: .*CPU"):
        load_backend("openvino", face_ir, {"device": "GPU.3"})


def test_corrupt_model_files_are_model_load_errors(face_ir: ModelSource, tmp_path: Path) -> None:
    broken_xml = tmp_path / "broken.xml"
    broken_xml.write_bytes(face_ir.path.read_bytes()[:3000])
    (tmp_path / "broken.bin").write_bytes(face_ir.path.with_suffix(".bin").read_bytes())
    with pytest.raises(ModelLoadError, match=r"broken\.xml: Error parsing"):
        load_backend("openvino", source(broken_xml))
    truncated = tmp_path / "truncated.xml"
    truncated.write_bytes(face_ir.path.read_bytes())
    (tmp_path / "truncated.bin").write_bytes(face_ir.path.with_suffix(".bin").read_bytes()[:1000])
    with pytest.raises(ModelLoadError, match=r"truncated\.xml: Incorrect weights"):
        load_backend("openvino", source(truncated))


def test_compiled_blobs_are_cached_and_reused(face_ir: ModelSource, tmp_path: Path) -> None:
    first = load_backend("openvino", face_ir, {"cache_dir": tmp_path})
    blobs = list(tmp_path.rglob("*.blob"))
    assert blobs, "compiling with a cache_dir writes a blob"
    assert first.runs_on.details["cache_dir"].startswith(str(tmp_path))
    assert first.runs_on.details["loaded_from_cache"] == "False"
    second = load_backend("openvino", face_ir, {"cache_dir": tmp_path})
    assert second.runs_on.details["loaded_from_cache"] == "True"
    assert sorted(tmp_path.rglob("*.blob")) == sorted(blobs)
    uncached = load_backend("openvino", face_ir, {"cache_dir": tmp_path / "off", "compile_cache": False})
    assert not (tmp_path / "off").exists() and uncached.runs_on.details["cache_dir"] == ""


def test_async_runner_returns_every_result_with_its_userdata_in_order(
    tiny_openvino: Path, rng: np.random.Generator
) -> None:
    backend = load_backend("openvino", source(tiny_openvino), {"hint": "throughput"})
    assert int(backend.runs_on.details["num_requests"]) >= 1
    images = [rng.random((1, 3, 32, 32), dtype=np.float32) for _ in range(24)]
    expected = [backend.infer([image])[0] for image in images]
    results: dict[int, np.ndarray] = {}
    callback_threads: set[str] = set()
    in_flight, most_in_flight = 0, 0
    lock = threading.Lock()

    def on_result(userdata: Any, outputs: list[np.ndarray] | None, error: BaseException | None) -> None:
        nonlocal in_flight
        assert error is None and outputs is not None
        with lock:
            in_flight -= 1
            results[userdata] = outputs[0]
            callback_threads.add(threading.current_thread().name)

    runner = backend.async_runner(on_result, max_in_flight=4)
    assert runner.capacity == 4
    for index, image in enumerate(images):
        runner.submit([image], userdata=index)
        with lock:
            in_flight += 1
            most_in_flight = max(most_in_flight, in_flight)
    runner.close()
    assert list(results) == list(range(len(images)))  # delivered in the order they were submitted
    assert callback_threads == {"openvino-done"}  # never on OpenVINO's own threads, which would need the GIL
    assert most_in_flight <= runner.capacity
    for index, want in enumerate(expected):
        np.testing.assert_allclose(results[index], want, atol=1e-6)
    assert len({result.tobytes() for result in results.values()}) == len(images)


def test_try_submit_starts_only_on_an_idle_infer_request_and_never_waits(
    tiny_openvino: Path, rng: np.random.Generator
) -> None:
    """A request goes back to the pool before its callback, and the next one only after: a callback that waits
    holds the request behind it, which makes "every request busy" a state the test can reach for sure."""
    backend = load_backend("openvino", source(tiny_openvino), {"hint": "throughput"})
    images = [rng.random((1, 3, 32, 32), dtype=np.float32) for _ in range(4)]
    entered, release = threading.Event(), threading.Event()
    results: dict[int, np.ndarray] = {}

    def on_result(userdata: Any, outputs: list[np.ndarray] | None, error: BaseException | None) -> None:
        entered.set()
        release.wait(30)
        assert outputs is not None
        results[userdata] = outputs[0]

    runner = backend.async_runner(on_result, max_in_flight=2)
    try:
        assert runner.try_submit([images[0]], userdata=0) and runner.try_submit([images[1]], userdata=1)
        assert entered.wait(30)  # 0's request is back in the pool; 1's waits behind 0's callback
        assert runner.try_submit([images[2]], userdata=2)
        assert not runner.try_submit([images[3]], userdata=3)  # returns at once: both requests are busy
    finally:
        release.set()
        runner.close()
    assert sorted(results) == [0, 1, 2]
    for index in (0, 1, 2):
        np.testing.assert_allclose(results[index], backend.infer([images[index]])[0], atol=1e-6)


def test_async_runner_defaults_to_twice_the_optimal_request_count(tiny_openvino: Path) -> None:
    backend = load_backend("openvino", source(tiny_openvino), {"hint": "throughput", "max_in_flight": 1})
    runner = backend.async_runner(lambda *_: None)
    assert runner.capacity == 1
    runner.close()
    free = load_backend("openvino", source(tiny_openvino), {"hint": "throughput"})
    free_runner = free.async_runner(lambda *_: None)
    assert free_runner.capacity == 2 * int(free.runs_on.details["num_requests"])
    free_runner.close()


def test_async_runner_reports_bad_inputs_and_callback_failures(tiny_openvino: Path) -> None:
    backend = load_backend("openvino", source(tiny_openvino))
    errors: list[tuple[Any, BaseException | None]] = []
    runner = backend.async_runner(lambda userdata, outputs, error: errors.append((userdata, error)))
    runner.submit([np.zeros((1, 3, 8, 8), np.float32)], userdata="bad")
    runner.wait_all()
    assert errors and errors[0][0] == "bad" and isinstance(errors[0][1], ModelMismatchError)

    def failing(userdata: Any, outputs: Any, error: Any) -> None:
        raise ValueError("callback broke")

    broken = backend.async_runner(failing)
    broken.submit([np.zeros((1, 3, 32, 32), np.float32)])
    with pytest.raises(ValueError, match="callback broke"):
        broken.wait_all()
    broken.close()


def test_async_runner_gives_back_the_slot_of_a_failed_submit_and_refuses_work_after_close(
    tiny_openvino: Path,
) -> None:
    class Unreadable:
        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            raise ZeroDivisionError("the camera driver broke")

    backend = load_backend("openvino", source(tiny_openvino))
    done: list[Any] = []
    raised: list[BaseException] = []
    runner = backend.async_runner(lambda userdata, outputs, error: done.append(userdata), max_in_flight=1)

    def submit_all() -> None:
        for _ in range(3):  # with one request, a slot lost to the first failure would block the second submit
            try:
                runner.submit([Unreadable()], userdata="broken")
            except ZeroDivisionError as error:
                raised.append(error)
        runner.submit([np.zeros((1, 3, 32, 32), np.float32)], userdata="good")
        runner.wait_all()  # returns only if the failed submits left nothing outstanding

    worker = threading.Thread(target=submit_all, daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "a failed submit kept its request or its count"
    assert len(raised) == 3 and done == ["good"]
    runner.close()
    with pytest.raises(RuntimeError, match="closed"):
        runner.submit([np.zeros((1, 3, 32, 32), np.float32)])


def test_infer_returns_copies_and_rejects_wrong_shapes(tiny_openvino: Path, rng: np.random.Generator) -> None:
    backend = load_backend("openvino", source(tiny_openvino))
    (first,) = backend.infer([rng.random((1, 3, 32, 32), dtype=np.float32)])
    kept = first.copy()
    backend.infer([rng.random((1, 3, 32, 32), dtype=np.float32)])
    np.testing.assert_array_equal(first, kept)
    with pytest.raises(ModelMismatchError, match=r"image: float32\[1, 3, 32, 32\]"):
        backend.infer([np.zeros((1, 3, 16, 16), np.float32)])


def test_infer_converts_inputs_it_cannot_share(tiny_openvino: Path, rng: np.random.Generator) -> None:
    backend = load_backend("openvino", source(tiny_openvino))
    image = rng.random((1, 3, 32, 32), dtype=np.float32)
    (want,) = backend.infer([image])
    wide = np.zeros((1, 3, 32, 64), np.float32)
    wide[..., ::2] = image
    (from_strided,) = backend.infer([wide[..., ::2]])
    (from_float64,) = backend.infer([image.astype(np.float64)])
    unaligned = np.frombuffer(bytearray(image.nbytes + 1), np.float32, image.size, 1).reshape(image.shape)
    unaligned[...] = image
    assert not unaligned.flags.aligned and unaligned.flags.writeable
    assert shareable(unaligned, np.dtype(np.float32)) is not unaligned
    assert shareable(image, np.dtype(np.float32)) is image
    (from_unaligned,) = backend.infer([unaligned])
    np.testing.assert_allclose(from_strided, want, atol=1e-7)
    np.testing.assert_allclose(from_float64, want, atol=1e-6)
    np.testing.assert_array_equal(from_unaligned, want)
    with pytest.raises(ModelMismatchError, match="refused the inputs"):
        backend.infer([image, image])


def test_dynamic_batch_is_pinned_for_devices_needing_static_shapes(tmp_path: Path) -> None:
    dynamic = build_tiny_classifier_onnx(tmp_path / "dynamic.onnx", batch="N")
    model = openvino_core().read_model(str(dynamic))
    make_static(model, OpenVinoOptions(), needs_static=False, path=dynamic)
    assert model.is_dynamic()
    make_static(model, OpenVinoOptions(), needs_static=True, path=dynamic)
    assert not model.is_dynamic() and list(model.inputs[0].get_shape()) == [1, 3, 32, 32]


def test_a_device_needing_static_shapes_keeps_them_when_batches_are_asked_for(tmp_path: Path) -> None:
    dynamic = build_tiny_classifier_onnx(tmp_path / "dynamic.onnx", batch="N")
    model = openvino_core().read_model(str(dynamic))
    make_static(model, OpenVinoOptions(dynamic_batch=True), needs_static=True, path=dynamic)
    assert not model.is_dynamic() and list(model.inputs[0].get_shape()) == [1, 3, 32, 32]
    fixed = openvino_core().read_model(str(build_tiny_classifier_onnx(tmp_path / "fixed.onnx")))
    make_static(fixed, OpenVinoOptions(dynamic_batch=True), needs_static=False, path=dynamic)
    assert fixed.inputs[0].get_partial_shape().to_string() == "[?,3,32,32]"


def test_static_shape_fixes_a_dynamic_batch(tmp_path: Path) -> None:
    dynamic = build_tiny_classifier_onnx(tmp_path / "dynamic.onnx", batch="N")
    assert load_backend("openvino", source(dynamic)).inputs[0].shape == (None, 3, 32, 32)
    fixed = load_backend("openvino", source(dynamic), {"static_shape": [1, 3, 32, 32]})
    assert fixed.inputs[0].shape == (1, 3, 32, 32) and fixed.outputs[0].shape == (1, 10)
    with pytest.raises(ConfigError, match="cannot reshape"):
        load_backend("openvino", source(dynamic), {"static_shape": [1, 3, 32]})


def face_preprocessing(face_package_dir: Path, height: int, width: int) -> EmbeddedPreprocessing:
    spec = read_manifest(face_package_dir / "model.yaml").inputs[0].model_copy(update={"resize": "stretch"})
    return EmbeddedPreprocessing.from_input_spec(spec, height, width, frame_color="BGR")


def test_embedded_preprocessing_matches_host_preprocessing_exactly_at_model_size(
    face_ir: ModelSource, face_package_dir: Path, astronaut_bgr: np.ndarray, face_input: np.ndarray
) -> None:
    frame = cv2.resize(astronaut_bgr, (128, 128), interpolation=cv2.INTER_LINEAR)
    folded = load_backend(
        "openvino", face_ir, {"embedded_preprocessing": face_preprocessing(face_package_dir, 128, 128)}
    )
    assert [(s.shape, s.dtype) for s in folded.inputs] == [((1, 128, 128, 3), "uint8")]
    plain = load_backend("openvino", face_ir)
    for got, want in zip(folded.infer([frame[np.newaxis]]), plain.infer([face_input]), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-3)


def test_embedded_preprocessing_resizes_a_full_frame_like_opencv(
    face_ir: ModelSource, face_package_dir: Path, astronaut_bgr: np.ndarray, face_input: np.ndarray
) -> None:
    height, width = astronaut_bgr.shape[:2]
    folded = load_backend(
        "openvino", face_ir, {"embedded_preprocessing": face_preprocessing(face_package_dir, height, width)}
    )
    assert [(s.shape, s.dtype) for s in folded.inputs] == [((1, height, width, 3), "uint8")]
    boxes, scores = folded.infer([astronaut_bgr[np.newaxis]])
    want_boxes, want_scores = load_backend("openvino", face_ir).infer([face_input])
    best = int(want_scores.argmax())
    assert int(scores.argmax()) == best
    assert scores[0, best, 0] == pytest.approx(want_scores[0, best, 0], abs=0.1)
    np.testing.assert_allclose(boxes[0, best, :4], want_boxes[0, best, :4], atol=0.5)
    assert float(np.median(np.abs(scores - want_scores))) < 0.05


def test_only_stretch_resize_can_be_folded(face_package_dir: Path) -> None:
    spec = read_manifest(face_package_dir / "model.yaml").inputs[0]
    assert spec.resize == "letterbox"
    with pytest.raises(ConfigError, match="cannot fold resize 'letterbox'"):
        EmbeddedPreprocessing.from_input_spec(spec, 480, 640)
    folding = face_preprocessing(face_package_dir, 480, 640)
    assert (folding.model_color, folding.model_layout, folding.mean, folding.std) == ("RGB", "NHWC", (127.5,), (127.5,))


def test_embedded_preprocessing_converts_colour_layout_and_per_channel_normalisation(
    tiny_openvino: Path, astronaut_bgr: np.ndarray
) -> None:
    mean, std = (120.0, 110.0, 100.0), (60.0, 50.0, 40.0)
    folding = EmbeddedPreprocessing(
        frame_height=32, frame_width=32, model_color="RGB", model_layout="NCHW", mean=mean, std=std
    )
    folded = load_backend("openvino", source(tiny_openvino), {"embedded_preprocessing": folding})
    assert [(s.name, s.shape, s.dtype) for s in folded.inputs] == [("image", (1, 32, 32, 3), "uint8")]
    frame = np.ascontiguousarray(astronaut_bgr[200:232, 220:252])
    rgb = frame[..., ::-1].astype(np.float32)
    chw = ((rgb - np.array(mean, np.float32)) / np.array(std, np.float32)).transpose(2, 0, 1)[np.newaxis]
    (want,) = load_backend("openvino", source(tiny_openvino)).infer([np.ascontiguousarray(chw)])
    (got,) = folded.infer([frame[np.newaxis]])
    np.testing.assert_allclose(got, want, atol=1e-5)
    with pytest.raises(ConfigError, match="'pixels' is not an input"):
        load_backend(
            "openvino",
            source(tiny_openvino),
            {"embedded_preprocessing": folding.model_copy(update={"input_name": "pixels"})},
        )
