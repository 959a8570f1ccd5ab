"""The servers `serving.py` compares, each run as its own process on a loopback port.

    edge            edge_runtime's `Serving`: the Open Inference Protocol on Starlette/uvicorn, Triton's
                    batching rule, OpenVINO's async runner; optionally answering MQTT 5 requests too
                    (`--mqtt-port`); `--hint latency` for the edge-latency side
    pytriton-basic  PyTriton as first set up: Triton's C++ HTTP frontend and dynamic batcher handing each
                    batch to a Python callable that runs one synchronous infer request, one model
                    instance per infer request OpenVINO plans; batches of `--max-batch-size` for
                    MobileNetV2, none for the face detector
    naive           FastAPI + uvicorn calling the compiled model once per request in its handler: what a
                    user writes first, with neither batching nor several requests in flight
    triton-server, pytriton-tuned, fastapi-async, litserve
                    the configurations a skilled user would pick: see serving_competitors.py

All load the same OpenVINO IR on the CPU at an explicit fp32 inference precision. edge and pytriton-basic
compile it alike (throughput hint, the batch dimension freed) with the same `max_batch_size` and queue
delay; naive compiles it as `compile_model(path, "CPU")` does (latency hint) at batch 1. A server prints
`ready <port>` once its model's readiness route answers 200, and serves until it is terminated.

edge runs in the project's venv; the others in the bench's own venv (see serving.py), since PyTriton pins
versions of its own.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

HOST = "127.0.0.1"
F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def wait_ready(port: int, name: str, timeout: float = 60.0) -> None:
    """Poll the model's readiness route until it answers 200, then say so on stdout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/v2/models/{name}/ready", timeout=1) as answer:
                if answer.status == 200:
                    print(f"ready {port}", flush=True)
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"the server on port {port} did not become ready within {timeout:g} s")


def until_terminated() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()


# -- edge_runtime ------------------------------------------------------------------------------------------


def serve_edge(args: argparse.Namespace) -> None:
    from edge_runtime.config.serving import ServeSettings
    from edge_runtime.mqtt.connection import MqttConnection
    from edge_runtime.mqtt.settings import MqttSettings
    from edge_runtime.mqtt.topics import Topics
    from edge_runtime.placement.loading import look_at_box
    from edge_runtime.placement.model_pool import ModelPool
    from edge_runtime.serving.service import Serving

    model = {
        "name": args.name,
        "path": str(args.package),
        "backend": "openvino",
        "variant": "openvino/fp32",
        "precision": "fp32",
        **({"hint": args.hint} if args.hint else {}),
        "batching": {
            "max_batch_size": args.max_batch_size,
            "max_queue_delay_ms": args.delay_ms,
            "max_queue_size": 1024,
        },
    }
    settings = ServeSettings.model_validate(
        {"http": {"port": args.port}, "mqtt": args.mqtt_port is not None, "models": [model]}
    )
    connection, topics = None, None
    if args.mqtt_port is not None:
        connection = MqttConnection(MqttSettings(host=HOST, port=args.mqtt_port), args.device_id)
        topics = Topics("edge", args.device_id)
        connection.start()
        if not connection.wait_connected(10):
            raise SystemExit(f"no connection to the broker on port {args.mqtt_port}")
    with tempfile.TemporaryDirectory(prefix="serving-bench-") as scratch:
        root = Path(scratch)
        pool = ModelPool(look_at_box(), root / "state", root / "cache")
        serving = Serving(settings, args.device_id, pool, root / "config.yaml", connection, topics)
        serving.start()
        wait_ready(args.port, args.name)
        until_terminated()
        serving.stop()
        pool.close()
        if connection is not None:
            connection.stop()


# -- PyTriton, basic ----------------------------------------------------------------------------------------------


def compiled_for_serving(xml: Path, batched: bool) -> Any:
    """The IR compiled as edge_runtime compiles a served model: throughput hint, the batch freed if batched."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(xml))
    if batched:
        model.reshape(
            {port: ov.PartialShape([ov.Dimension(), *list(port.get_partial_shape())[1:]]) for port in model.inputs}
        )
    return core.compile_model(model, "CPU", {"PERFORMANCE_HINT": "THROUGHPUT", **F32})


def serve_pytriton_basic(args: argparse.Namespace) -> None:
    from pytriton.decorators import batch  # type: ignore[import-not-found, unused-ignore]
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor  # type: ignore[import-not-found, unused-ignore]
    from pytriton.triton import Triton, TritonConfig  # type: ignore[import-not-found, unused-ignore]

    batched = args.max_batch_size > 0
    compiled = compiled_for_serving(args.xml, batched)
    instances = int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
    names = [port.get_any_name() for port in compiled.outputs]

    def instance() -> Any:
        request = compiled.create_infer_request()

        def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            results = request.infer([inputs[port.get_any_name()] for port in compiled.inputs])
            return {name: results[port] for name, port in zip(names, compiled.outputs, strict=True)}

        def one_by_one(requests: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
            return [run(inputs) for inputs in requests]

        return batch(lambda **inputs: run(inputs)) if batched else one_by_one

    def shape_of(port: Any) -> tuple[int, ...]:
        dims = list(port.get_partial_shape())[1 if batched else 0 :]
        return tuple(-1 if d.is_dynamic else d.get_length() for d in dims) or (1,)

    config = TritonConfig(http_address=HOST, http_port=args.port, grpc_port=args.port + 1, metrics_port=args.port + 2)
    with Triton(config=config) as triton:
        triton.bind(
            model_name=args.name,
            infer_func=[instance() for _ in range(instances)],
            inputs=[Tensor(name=p.get_any_name(), dtype=np.float32, shape=shape_of(p)) for p in compiled.inputs],
            outputs=[Tensor(name=p.get_any_name(), dtype=np.float32, shape=shape_of(p)) for p in compiled.outputs],
            config=ModelConfig(
                batching=batched,
                max_batch_size=args.max_batch_size,
                batcher=DynamicBatcher(max_queue_delay_microseconds=int(args.delay_ms * 1000)),
            ),
            strict=False,
        )
        triton.run()
        wait_ready(args.port, args.name)
        until_terminated()


# -- FastAPI, one request at a time ------------------------------------------------------------------------


def serve_naive(args: argparse.Namespace) -> None:
    import os

    import uvicorn

    os.environ["NAIVE_MODEL_XML"] = str(args.xml)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from serving_naive import app

    server = uvicorn.Server(uvicorn.Config(app, host=HOST, port=args.port, log_level="warning", access_log=False))
    threading.Thread(target=wait_ready, args=(args.port, args.name), daemon=True).start()
    server.run()


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import serving_competitors as competitors

    serve = {
        "edge": serve_edge,
        "pytriton-basic": serve_pytriton_basic,
        "naive": serve_naive,
        "triton-server": competitors.serve_triton_server,
        "pytriton-tuned": competitors.serve_pytriton_tuned,
        "fastapi-async": competitors.serve_fastapi_async,
        "litserve": competitors.serve_litserve,
    }
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("side", choices=list(serve))
    parser.add_argument("--name", required=True, help="the model's name in URLs")
    parser.add_argument("--xml", type=Path, help="the OpenVINO IR (all but edge)")
    parser.add_argument("--package", type=Path, help="the model package (edge)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=8, help="edge, pytriton-basic")
    parser.add_argument("--delay-ms", type=float, default=2.0, help="how long a batcher waits for more requests")
    parser.add_argument("--group", type=int, default=8, help="requests a batcher gathers for one call; 0: none")
    parser.add_argument("--join", choices=["concat", "side-by-side"], default="side-by-side",
                        help="joined into one batch, or side by side on OpenVINO's streams")  # fmt: skip
    parser.add_argument("--instances", type=int, default=2, help="triton-server, pytriton-tuned: model instances")
    parser.add_argument("--workers", type=int, default=1, help="litserve: inference worker processes")
    parser.add_argument("--mqtt-port", type=int, help="edge: also answer MQTT requests via this broker")
    parser.add_argument("--device-id", default="bench-box")
    parser.add_argument("--hint", choices=["latency", "throughput"], help="edge: the served model's hint")
    args = parser.parse_args()
    serve[args.side](args)


if __name__ == "__main__":
    main()
