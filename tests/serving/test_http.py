"""The HTTP endpoint against clients nobody here wrote (tritonclient, plain HTTP), on real backends."""

from __future__ import annotations

import base64
import http.client
import json
import logging
import resource
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
import tritonclient.http as triton
from image_bombs import png_declaring
from tritonclient.utils import InferenceServerException
from waiting import wait_for

from edge_runtime import strict_json
from edge_runtime.package.loader import open_package
from edge_runtime.pipeline.results import result_schema
from edge_runtime.placement.loading import Box
from edge_runtime.placement.model import load_model
from edge_runtime.serving.service import Serving

StartServing = Callable[..., Serving]
TOKEN = "0123456789abcdef-serve"  # a test's token, long enough for the settings


def client(serving: Serving) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(f"127.0.0.1:{serving.port}", network_timeout=30)


def post(
    serving: Serving, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, Any, dict[str, str]]:
    connection = http.client.HTTPConnection("127.0.0.1", serving.port, timeout=30)
    connection.request("POST", path, body, headers or {"Content-Type": "application/json"})
    response = connection.getresponse()
    payload = response.read()
    answer = json.loads(payload) if response.getheader("content-type", "").startswith("application/json") else payload
    return response.status, answer, dict(response.getheaders())


def images(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (count, 3, 32, 32)).astype(np.float32)


@pytest.fixture
def classifier(start_serving: StartServing, batch_classifier: Path) -> Serving:
    return start_serving([{"name": "classifier", "path": str(batch_classifier)}])


def test_tritonclient_sees_a_live_server_and_the_models_metadata(classifier: Serving) -> None:
    triton_client = client(classifier)
    assert triton_client.is_server_live() and triton_client.is_server_ready()
    assert triton_client.is_model_ready("classifier")
    assert not triton_client.is_model_ready("nothing-here")
    metadata = triton_client.get_model_metadata("classifier")
    assert metadata["name"] == "classifier" and metadata["versions"] == ["1"]
    assert metadata["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 3, 32, 32]}]
    assert metadata["outputs"] == [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]}]
    assert triton_client.get_server_metadata()["extensions"] == ["binary_tensor_data"]


def test_a_served_model_takes_the_throughput_hint_unless_its_config_names_one(
    start_serving: StartServing, face_package: Path
) -> None:
    served = start_serving(
        [
            {"name": "streams", "path": str(face_package), "backend": "openvino"},
            {"name": "one-at-a-time", "path": str(face_package), "backend": "openvino", "hint": "latency"},
        ]
    )
    for name, hint in (("streams", "throughput"), ("one-at-a-time", "latency")):
        metadata = client(served).get_model_metadata(name)
        assert metadata["parameters"]["hint"] == hint
        assert served.models[name].model.backend.runs_on.details["hint"] == hint
    assert served.models["streams"].model is not served.models["one-at-a-time"].model


@pytest.mark.parametrize("binary", [True, False])
def test_infer_gives_what_the_model_gives_run_directly(
    classifier: Serving, batch_classifier: Path, binary: bool
) -> None:
    batch = images(3)
    tensor = triton.InferInput("image", list(batch.shape), "FP32")
    tensor.set_data_from_numpy(batch, binary_data=binary)
    wanted = triton.InferRequestedOutput("probabilities", binary_data=binary)
    result = client(classifier).infer("classifier", [tensor], outputs=[wanted], request_id="r-1")
    assert result.get_response()["id"] == "r-1"
    served = classifier.models["classifier"].model
    direct = load_model(open_package(batch_classifier), served.variant_id, served.backend.runs_on.backend,
                        {"precision": "fp32", "dynamic_batch": True})  # fmt: skip
    try:
        np.testing.assert_allclose(result.as_numpy("probabilities"), direct.infer([batch])[0], rtol=1e-5, atol=1e-6)
    finally:
        direct.close()


def test_concurrent_requests_leave_the_queue_in_batches(start_serving: StartServing, batch_classifier: Path) -> None:
    batching = {"max_batch_size": 8, "max_queue_delay_ms": 50, "batch_when": "always"}
    serving = start_serving([{"name": "classifier", "path": str(batch_classifier), "batching": batching}])
    assert serving.models["classifier"].max_batch_size == 8

    def one(index: int) -> np.ndarray:
        tensor = triton.InferInput("image", [1, 3, 32, 32], "FP32")
        sample = images(1, seed=index)
        tensor.set_data_from_numpy(sample)
        return client(serving).infer("classifier", [tensor]).as_numpy("probabilities")

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, range(16)))
    assert all(answer.shape == (1, 10) for answer in answers)
    figures = serving.report()["classifier"]
    assert figures["inference_count"] == 16 and figures["request_success"] == 16
    assert figures["execution_count"] < 16  # their ratio is the mean batch size: some requests ran together
    assert max(int(size) for size in figures["batch_sizes"]) > 1
    stages = ("prepare_ms_total", "queue_ms_total", "compute_ms_total", "respond_ms_total")
    assert all(figures[stage] > 0 for stage in stages), figures


def test_a_full_queue_answers_503_at_once(start_serving: StartServing, batch_classifier: Path) -> None:
    batching = {"max_batch_size": 64, "max_queue_delay_ms": 1500, "max_queue_size": 2, "batch_when": "always"}
    serving = start_serving([{"name": "classifier", "path": str(batch_classifier), "batching": batching}])
    body = json.dumps({"inputs": [{"name": "image", "shape": [1, 3, 32, 32], "datatype": "FP32",
                                   "data": images(1).ravel().tolist()}]}).encode()  # fmt: skip
    with ThreadPoolExecutor(2) as pool:
        waiting = [pool.submit(post, serving, "/v2/models/classifier/infer", body) for _ in range(2)]
        time.sleep(0.5)  # both sit in the queue, waiting for the batch to fill
        started = time.monotonic()
        status, answer, headers = post(serving, "/v2/models/classifier/infer", body)
        assert time.monotonic() - started < 1.0
        assert status == 503 and headers["retry-after"] == "1" and "already wait" in answer["error"]
        assert [future.result()[0] for future in waiting] == [200, 200]
    assert serving.report()["classifier"]["rejected_queue_full"] == 1


def test_a_request_past_its_timeout_is_answered_504_and_never_runs(
    start_serving: StartServing, batch_classifier: Path
) -> None:
    batching = {"max_batch_size": 64, "max_queue_delay_ms": 600, "timeout_ms": 100, "batch_when": "always"}
    serving = start_serving([{"name": "classifier", "path": str(batch_classifier), "batching": batching}])
    body = json.dumps({"inputs": [{"name": "image", "shape": [1, 3, 32, 32], "datatype": "FP32",
                                   "data": images(1).ravel().tolist()}]}).encode()  # fmt: skip
    status, answer, _ = post(serving, "/v2/models/classifier/infer", body)
    assert status == 504 and "timed out" in answer["error"]
    figures = serving.report()["classifier"]
    assert figures["timed_out_in_queue"] == 1 and figures["execution_count"] == 0


def test_an_image_is_answered_with_the_result_message_of_the_pipeline(
    start_serving: StartServing, face_package: Path, astronaut_bgr: np.ndarray
) -> None:
    serving = start_serving([{"name": "faces", "path": str(face_package)}])
    jpeg = (Path(__file__).resolve().parents[2] / "samples/images/astronaut.jpg").read_bytes()
    status, message, _ = post(serving, "/v2/models/faces/infer", jpeg, {"Content-Type": "image/jpeg"})
    assert status == 200, message
    jsonschema.validate(message, result_schema())
    assert message["task"] == "detection" and message["pipeline"] == "faces" and message["source"] == "request"
    (face,) = message["result"]["detections"]
    x0, y0, x1, y1 = face["box"]
    assert 150 < x0 < x1 < 320 and 50 < y0 < y1 < 250  # the astronaut's face, in the 512×512 photo's pixels
    assert message["frame"] == {"width": 512, "height": 512}
    assert face["keypoints"][0]["name"] == "right_eye" and "sha256" not in message["model"]
    # the digest the answer leaves out is in the model's metadata, as a pipeline's model topic has it
    metadata = client(serving).get_model_metadata("faces")
    variant = open_package(face_package).manifest.variants[message["model"]["variant"]]
    assert metadata["parameters"]["sha256"] == variant.files[0].sha256
    encoded = base64.b64encode(jpeg).decode()
    request = {"inputs": [{"name": "image", "shape": [1], "datatype": "BYTES", "data": [encoded]}]}
    status, again, _ = post(serving, "/v2/models/faces/infer", json.dumps(request).encode())
    assert status == 200 and again["result"]["detections"][0]["box"] == face["box"]
    tensor = triton.InferInput("image", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([jpeg], dtype=np.object_), binary_data=True)
    body, header_length = triton.InferenceServerClient.generate_request_body([tensor])
    headers = {"Inference-Header-Content-Length": str(header_length), "Content-Type": "application/octet-stream"}
    status, binary, _ = post(serving, "/v2/models/faces/infer", body, headers)
    assert status == 200 and binary["result"]["detections"][0]["box"] == face["box"]


def test_an_image_declaring_too_many_pixels_is_refused_413_before_it_is_decoded(
    start_serving: StartServing, face_package: Path
) -> None:
    """A 30000×30000 PNG of a few hundred bytes: answered at once, naming the limit, with the server's memory
    untouched; a base64 BYTES input holding it is refused the same way, and a JPEG within a lower limit passes."""
    serving = start_serving([{"name": "faces", "path": str(face_package)}])
    bomb = png_declaring(30000, 30000)
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    status, answer, _ = post(serving, "/v2/models/faces/infer", bomb, {"Content-Type": "image/png"})
    assert status == 413, answer
    assert "declares 30000×30000 pixels" in answer["error"] and "max_image_pixels" in answer["error"]
    encoded = base64.b64encode(bomb).decode()
    request = {"inputs": [{"name": "image", "shape": [1], "datatype": "BYTES", "data": [encoded]}]}
    status, answer, _ = post(serving, "/v2/models/faces/infer", json.dumps(request).encode())
    assert status == 413 and "30000×30000" in answer["error"], answer
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < 200 * 1024  # KiB
    status, answer, _ = post(serving, "/v2/models/faces/infer", b"GIF89a" + bytes(64), {"Content-Type": "image/png"})
    assert (status, answer["error"]) == (400, "the request's image is no JPEG, PNG, BMP or WebP image")


def test_the_pixel_limit_is_configured(start_serving: StartServing, face_package: Path) -> None:
    serving = start_serving([{"name": "faces", "path": str(face_package)}], max_image_pixels=512 * 512 - 1)
    jpeg = (Path(__file__).resolve().parents[2] / "samples/images/astronaut.jpg").read_bytes()
    status, answer, _ = post(serving, "/v2/models/faces/infer", jpeg, {"Content-Type": "image/jpeg"})
    assert status == 413 and "512×512 pixels (262,144), over the limit of 262,143" in answer["error"], answer


BAD_REQUESTS = [
    ({"inputs": [{"name": "pixels", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": [0.0] * 3072}]},
     400, "inputs[0]: unknown input 'pixels'; the model takes image"),
    ({"inputs": [{"name": "image", "shape": [1, 3, 32, 32], "datatype": "INT32", "data": [0] * 3072}]},
     400, "input 'image': datatype 'INT32', but the model takes FP32"),
    ({"inputs": [{"name": "image", "shape": [1, 3, 16, 16], "datatype": "FP32", "data": [0.0] * 768}]},
     400, "input 'image': shape [1, 3, 16, 16], but the model takes [-1, 3, 32, 32]"),
    ({"inputs": [{"name": "image", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": [0.0] * 5}]},
     400, "input 'image': shape [1, 3, 32, 32] holds 3072 elements, 'data' has 5"),
    ({"inputs": [{"name": "image", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": ["x"] * 3072}]},
     400, "input 'image': 'data' is not a list of FP32 values"),
    ({"inputs": []}, 400, "the request has no 'inputs' list"),
    ({"inputs": [{"name": "image", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": [0.0] * 3072}],
      "outputs": [{"name": "logits"}]}, 400, "unknown output 'logits'; the model gives probabilities"),
]  # fmt: skip


@pytest.mark.parametrize(("request_body", "status", "message"), BAD_REQUESTS)
def test_a_request_that_does_not_fit_is_answered_400_naming_the_tensor(
    classifier: Serving, request_body: dict[str, Any], status: int, message: str
) -> None:
    got, answer, _ = post(classifier, "/v2/models/classifier/infer", json.dumps(request_body).encode())
    assert (got, answer["error"]) == (status, message)


def test_malformed_and_truncated_bodies_and_unknown_models(classifier: Serving) -> None:
    status, answer, _ = post(classifier, "/v2/models/classifier/infer", b'{"inputs": [')
    assert status == 400 and answer["error"].startswith("the request is not valid JSON at line 1")
    tensor = triton.InferInput("image", [1, 3, 32, 32], "FP32")
    tensor.set_data_from_numpy(images(1), binary_data=True)
    body, header_length = triton.InferenceServerClient.generate_request_body([tensor])
    headers = {"Inference-Header-Content-Length": str(header_length)}
    status, answer, _ = post(classifier, "/v2/models/classifier/infer", body[:-100], headers)
    assert status == 400 and "binary_data_size 12288, but only 12188 bytes of binary data remain" in answer["error"]
    unknown_before = classifier.unknown_models.count
    status, answer, _ = post(classifier, "/v2/models/nothing/infer", body, headers)
    assert status == 404 and answer["error"] == "unknown model 'nothing'; served: classifier"
    assert classifier.unknown_models.count == unknown_before + 1  # counted for the stats, apart from any model
    status, answer, _ = post(classifier, "/v2/models/classifier/versions/7/infer", body, headers)
    assert status == 404 and "serves version 1" in answer["error"]
    status, answer, _ = post(
        classifier, "/v2/models/classifier/infer", b"\xff\xd8 not a jpeg", {"Content-Type": "image/jpeg"}
    )
    assert status == 400 and "no JPEG, PNG, BMP or WebP image" in answer["error"]
    assert classifier.report()["classifier"]["request_failure"] == 3


def test_json_nested_too_deep_or_with_nan_is_answered_400_and_counted(classifier: Serving) -> None:
    """100,000 nested `[` used to end in a RecursionError answered 500; Python's NaN and Infinity reached the model."""
    status, answer, _ = post(classifier, "/v2/models/classifier/infer", b"[" * 100_000)
    assert status == 400 and answer["error"].startswith("the request is nested deeper than 64 levels"), answer
    for constant in ("NaN", "Infinity", "-Infinity"):
        data = "[" + ", ".join([constant] + ["0.0"] * 3071) + "]"
        head = '{"inputs": [{"name": "image", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": '
        status, answer, _ = post(classifier, "/v2/models/classifier/infer", f"{head}{data}}}]}}".encode())
        assert (status, answer["error"]) == (400, f"the request holds {constant}, which is no JSON number: "
                                                  "JSON has finite numbers only")  # fmt: skip
    assert classifier.report()["classifier"]["request_failure"] == 4


def test_non_finite_outputs_are_answered_in_json_that_strict_readers_take(classifier: Serving) -> None:
    """Pixels near FP32's largest overflow inside the model, which answers NaN: written as the string "NaN", which a
    reader of the grammar takes (Python's `NaN` token was refused by them), and tritonclient reads back as NaN."""
    batch = images(2)
    batch[0] = 3e38
    tensor = triton.InferInput("image", list(batch.shape), "FP32")
    tensor.set_data_from_numpy(batch, binary_data=False)
    wanted = triton.InferRequestedOutput("probabilities", binary_data=False)
    body, header_length = triton.InferenceServerClient.generate_request_body([tensor], outputs=[wanted])
    assert header_length is None  # all JSON
    connection = http.client.HTTPConnection("127.0.0.1", classifier.port, timeout=30)
    connection.request("POST", "/v2/models/classifier/infer", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    raw = response.read()
    assert response.status == 200, raw
    (row,) = strict_json.loads(raw)["outputs"]
    assert set(row["data"][:10]) == {"NaN"} and all(isinstance(value, float) for value in row["data"][10:])
    result = client(classifier).infer("classifier", [tensor], outputs=[wanted])
    direct = classifier.models["classifier"].model.infer([batch])[0]
    assert np.isnan(direct[0]).all()
    np.testing.assert_allclose(result.as_numpy("probabilities"), direct, rtol=1e-5, atol=1e-6)  # NaN where NaN


def test_a_body_over_the_limit_is_refused_413(start_serving: StartServing, batch_classifier: Path) -> None:
    serving = start_serving([{"name": "classifier", "path": str(batch_classifier)}], max_body_bytes=4096)
    status, answer, _ = post(serving, "/v2/models/classifier/infer", b"{" + b" " * 5000 + b"}")
    assert status == 413 and "at most 4096" in answer["error"]


def headers_only(port: int, path: str, length: int) -> socket.socket:
    """A request whose headers promise `length` bytes of body, none of which is sent."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode())
    return sock


def answer_to(sock: socket.socket) -> tuple[int, dict[str, str], dict[str, Any]]:
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response.status, dict(response.getheaders()), json.loads(response.read())


def test_a_full_queue_refuses_at_the_headers_before_the_body_is_read(
    start_serving: StartServing, batch_classifier: Path
) -> None:
    """Every place in the queue is held (as by requests whose bodies are still arriving): the next request is
    answered 503 with Retry-After as soon as its headers are in, without waiting for the body it announced."""
    models = [{"name": "classifier", "path": str(batch_classifier), "batching": {"max_queue_size": 2}}]
    serving = start_serving(models)
    assert serving.port is not None
    queue = serving.models["classifier"].queue
    held = [queue.reserve(), queue.reserve()]
    started = time.monotonic()
    with headers_only(serving.port, "/v2/models/classifier/infer", 100_000) as sock:
        status, headers, answer = answer_to(sock)
    assert time.monotonic() - started < 2.0  # not the 10 s read timeout of a body never sent
    assert status == 503 and headers["retry-after"] == "1" and "2 requests already wait" in answer["error"]
    for place in held:
        place.release()
    body = json.dumps({"inputs": [{"name": "image", "shape": [1, 3, 32, 32], "datatype": "FP32",
                                   "data": images(1).ravel().tolist()}]}).encode()  # fmt: skip
    status, answer, _ = post(serving, "/v2/models/classifier/infer", body)
    assert status == 200, answer


def test_bodies_held_at_once_are_capped_before_they_are_read(
    start_serving: StartServing, batch_classifier: Path
) -> None:
    """Two bodies of 1 KiB still arriving fill a cap of 2 KiB: a third is refused from its headers, naming the
    cap; once the first two are gone, the same request is served."""
    models = [{"name": "classifier", "path": str(batch_classifier)}]
    serving = start_serving(models, max_body_bytes=1024, max_bytes_in_flight=2048)
    assert serving.port is not None
    path = "/v2/models/classifier/infer"
    slow = [headers_only(serving.port, path, 1024), headers_only(serving.port, path, 1024)]
    deadline = time.monotonic() + 10
    while True:  # until the server holds both (an attempt it admits before that waits for its body: let it go)
        with headers_only(serving.port, path, 1024) as sock:
            sock.settimeout(0.5)
            try:
                status, headers, answer = answer_to(sock)
                break
            except TimeoutError:
                assert time.monotonic() < deadline, "the server never refused a third body"
    assert status == 503 and headers["retry-after"] == "1", answer
    assert "would take it past 2048 (max_bytes_in_flight)" in answer["error"]
    for sock in slow:
        sock.close()
    body = b"{" + b" " * 1000 + b"}"
    assert wait_for(lambda: post(serving, path, body)[0] == 400, timeout=5)  # read, parsed, refused as no inputs


def test_a_client_that_sends_its_body_too_slowly_is_dropped(
    start_serving: StartServing, batch_classifier: Path
) -> None:
    serving = start_serving([{"name": "classifier", "path": str(batch_classifier)}], read_timeout_s=0.5)
    assert serving.port is not None
    with socket.create_connection(("127.0.0.1", serving.port), timeout=10) as sock:
        sock.sendall(b"POST /v2/models/classifier/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        started = time.monotonic()
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 5


def test_a_client_that_hangs_up_mid_body_leaves_no_traceback(
    start_serving: StartServing, batch_classifier: Path
) -> None:
    serving = start_serving([{"name": "classifier", "path": str(batch_classifier)}])
    assert serving.port is not None
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    uvicorn_log = logging.getLogger("uvicorn.error")  # where uvicorn reports what an application raised
    uvicorn_log.addHandler(handler)
    try:
        for sent in (0, 10, 600):
            with socket.create_connection(("127.0.0.1", serving.port)) as hanging_up:
                head = b"POST /v2/models/classifier/infer HTTP/1.1\r\nHost: box\r\nContent-Length: 1000\r\n\r\n"
                hanging_up.sendall(head + b"{" * sent)
                time.sleep(0.1)
        time.sleep(0.3)
        status, _, _ = post(serving, "/v2/models/classifier/infer", b'{"inputs": [')
    finally:
        uvicorn_log.removeHandler(handler)
    assert status == 400  # still answering
    assert [r.getMessage() for r in records if r.levelno >= logging.ERROR or r.exc_info] == []


def test_a_token_guards_everything_but_health(start_serving: StartServing, batch_classifier: Path) -> None:
    serving = start_serving([{"name": "classifier", "path": str(batch_classifier)}], token=TOKEN)
    assert client(serving).is_server_live()
    with pytest.raises(InferenceServerException, match="a valid bearer token is required"):
        client(serving).get_model_metadata("classifier")
    good = client(serving).get_model_metadata("classifier", headers={"Authorization": f"Bearer {TOKEN}"})
    assert good["name"] == "classifier"
    with pytest.raises(InferenceServerException, match="bearer token"):
        client(serving).get_model_metadata("classifier", headers={"Authorization": f"Bearer {TOKEN}-not"})


def test_off_loopback_a_token_is_required() -> None:
    from pydantic import ValidationError

    from edge_runtime.config.serving import HttpSettings

    with pytest.raises(ValidationError, match="off loopback, needs a token"):
        HttpSettings(host="0.0.0.0")
    assert HttpSettings(host="::1").token is None


@pytest.mark.parametrize(
    ("token", "refusal"),
    [
        ("", "is empty, which would let anyone in"),
        ("s3cret", "has 6 characters, fewer than the 16 a token needs"),
        (f" {TOKEN}", "begins or ends with whitespace"),
    ],
)
def test_an_empty_or_short_token_is_refused_by_the_settings(token: str, refusal: str) -> None:
    from pydantic import ValidationError

    from edge_runtime.config.serving import HttpSettings

    with pytest.raises(ValidationError, match=refusal) as refused:
        HttpSettings.model_validate({"host": "0.0.0.0", "token": token})
    ((location, message),) = [(error["loc"], error["msg"]) for error in refused.value.errors()]
    assert location == ("token",) and (not token or token.strip() not in message)  # the message never shows it


def test_a_bearer_with_no_value_is_refused_even_where_an_empty_token_slipped_through(
    box: Box, tmp_path: Path, batch_classifier: Path
) -> None:
    """The settings refuse an empty token; one that bypassed them (a program building them) must not make
    `Authorization: Bearer` with nothing after it a key: every route but health answers 401."""
    from pydantic import SecretStr

    from edge_runtime.config.serving import ServeSettings
    from edge_runtime.placement.model_pool import ModelPool

    checked = ServeSettings.model_validate(
        {"http": {"port": 0, "token": TOKEN}, "models": [{"name": "classifier", "path": str(batch_classifier)}]}
    )
    settings = checked.model_copy(update={"http": checked.http.model_copy(update={"token": SecretStr("")})})
    pool = ModelPool(box, tmp_path / "state", tmp_path / "cache")
    serving = Serving(settings, "test-box", pool, tmp_path / "config.yaml")
    try:
        serving.start()
        for authorization in ("Bearer", "Bearer ", "bearer   "):
            connection = http.client.HTTPConnection("127.0.0.1", serving.port, timeout=10)
            connection.request("GET", "/v2/models/classifier", headers={"Authorization": authorization})
            response = connection.getresponse()
            assert response.status == 401, (authorization, response.read())
            response.read()
        assert client(serving).is_server_live()
    finally:
        serving.stop()
        pool.close()


def test_the_openapi_document_lists_every_route(classifier: Serving) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", classifier.port, timeout=10)
    connection.request("GET", "/v2/openapi.json")
    document = json.loads(connection.getresponse().read())
    assert document["openapi"].startswith("3.")
    assert {"/v2", "/v2/health/live", "/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer"} <= set(
        document["paths"]
    )


def test_https_with_the_configured_certificate(
    start_serving: StartServing, batch_classifier: Path, tmp_path: Path
) -> None:
    import ssl

    from broker import make_pki

    pki = make_pki(tmp_path / "pki")
    serving = start_serving(
        [{"name": "classifier", "path": str(batch_classifier)}],
        tls_cert_file=str(pki.server_cert),
        tls_key_file=str(pki.server_key),
    )
    trusting = ssl.create_default_context(cafile=str(pki.ca_cert))
    connection = http.client.HTTPSConnection("127.0.0.1", serving.port, timeout=10, context=trusting)
    connection.request("GET", "/v2/models/classifier")
    assert json.loads(connection.getresponse().read())["name"] == "classifier"
    stranger = ssl.create_default_context(cafile=str(pki.other_ca_cert))
    with pytest.raises(ssl.SSLCertVerificationError):
        http.client.HTTPSConnection("127.0.0.1", serving.port, timeout=10, context=stranger).request("GET", "/v2")
    plain = http.client.HTTPConnection("127.0.0.1", serving.port, timeout=10)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError, http.client.BadStatusLine)):
        plain.request("GET", "/v2")
        plain.getresponse()


def test_the_listening_socket_lets_asyncio_turn_nagle_off(classifier: Serving) -> None:
    """asyncio sets TCP_NODELAY only on sockets whose proto is IPPROTO_TCP; a socket made with proto 0 kept
    Nagle's algorithm on every accepted connection, and each small answer waited for the client's delayed
    ACK (about 40 ms on Linux) before it left."""
    assert classifier._socket is not None and classifier._socket.proto == socket.IPPROTO_TCP


def test_a_committed_release_is_served_from_then_on(start_serving: StartServing, face_package: Path) -> None:
    """After a rollout commits, served models of the package load again (the active release) and answer."""
    import shutil

    import yaml

    serving = start_serving([{"name": "faces", "path": str(face_package)}])
    jpeg = (Path(__file__).resolve().parents[2] / "samples/images/astronaut.jpg").read_bytes()
    assert post(serving, "/v2/models/faces/infer", jpeg, {"Content-Type": "image/jpeg"})[0] == 200
    store = serving.pool.store
    staged = shutil.copytree(face_package, store.staging("r-9") / "package")
    manifest = yaml.safe_load((staged / "model.yaml").read_text())
    manifest["version"] = "9.9"
    (staged / "model.yaml").write_text(yaml.safe_dump(manifest))
    store.install(manifest["name"], 9, staged)
    store.activate(manifest["name"], 9)
    assert serving.take_release("someone_else") == []
    assert serving.take_release(manifest["name"]) == ["faces"]
    status, message, _ = post(serving, "/v2/models/faces/infer", jpeg, {"Content-Type": "image/jpeg"})
    assert status == 200 and message["model"]["version"] == "9.9"
    assert serving.report()["faces"]["request_success"] == 2  # the counters go on across the switch
