"""The competitors of `serving.py` as a skilled user would deploy them on a CPU box, beside the basic setups.

    triton-server   Triton's own server binary (the one PyTriton's wheel ships) run directly, without
                    PyTriton's hop through its proxy: a model repository written to a temporary directory
                    holds a Python-backend model (serving_triton_model.py) that runs OpenVINO's
                    AsyncInferQueue on the requests Triton's dynamic batcher gathers
    pytriton-tuned  PyTriton with its dynamic batcher gathering requests for each call of the inference
                    callable, which runs them on an AsyncInferQueue, and several instances
    fastapi-async   FastAPI + uvicorn (uvloop, httptools) awaiting an AsyncInferQueue from its route
                    (serving_fastapi_async.py): the event loop never blocks
    litserve        LitServe (its own FastAPI/uvicorn front, worker processes, ZeroMQ queue) with its
                    batching, the gathered requests run on an AsyncInferQueue

Every side compiles the same IR on the CPU at explicit fp32 under the throughput hint, the hint
edge_runtime's endpoint uses by default. Where the requests a batcher gathers run is a choice per model:
joined into one batch (`--join concat`) or side by side on OpenVINO's streams (`--join side-by-side`).
On the 2-core box this benchmark runs on batches lose for MobileNetV2 (0.97× at 4, 0.89× at 8, see
serving_batching.py and docs/performance.md), and the face detector's graph cannot be batched at all,
so `TUNING` runs both side by side, gathering requests only to cut the per-call cost of each server's
hand-over to Python. Instances: Triton's run in Python stub processes of their own, each with its own
compiled model, so one instance keeps OpenVINO's streams fed through its queue while a second takes the
next gathered requests; PyTriton's run as threads of one process over one compiled model.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
HOST = "127.0.0.1"
THROUGHPUT_F32 = {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_PRECISION_HINT": "f32"}

# Per side and model: the options each side's server is started with (see serving_servers.py's arguments).
# `--group` is how many requests a batcher gathers for one call (Triton's max_batch_size), `--instances`
# Triton's or PyTriton's model instances, `--workers` LitServe's inference worker processes.
TUNING: dict[str, dict[str, list[str]]] = {
    "triton-server": {
        "mobilenet_v2": ["--group", "8", "--instances", "2", "--join", "side-by-side", "--delay-ms", "0"],
        "face": ["--group", "8", "--instances", "2", "--join", "side-by-side", "--delay-ms", "0"],
    },
    "pytriton-tuned": {
        "mobilenet_v2": ["--group", "8", "--instances", "4", "--join", "side-by-side", "--delay-ms", "0"],
        "face": ["--group", "8", "--instances", "4", "--join", "side-by-side", "--delay-ms", "0"],
    },
    "litserve": {  # batch_timeout 0 would make its batching loop poll its queue without pause
        "mobilenet_v2": ["--group", "8", "--workers", "1", "--join", "side-by-side", "--delay-ms", "2"],
        "face": ["--group", "8", "--workers", "1", "--join", "side-by-side", "--delay-ms", "2"],
    },
}


def tuning(side: str, model: str) -> list[str]:
    return TUNING.get(side, {}).get(model, [])


def compiled_for(xml: Path, concat: bool) -> Any:
    """The IR compiled under the throughput hint at fp32, the batch dimension freed where batches are joined."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(xml))
    if concat:
        model.reshape({p: ov.PartialShape([ov.Dimension(), *list(p.get_partial_shape())[1:]]) for p in model.inputs})
    return core.compile_model(model, "CPU", THROUGHPUT_F32)


class Runner:
    """Runs the requests of one call, each a list of input arrays: joined into one batch, or side by side on
    an AsyncInferQueue of as many infer requests as OpenVINO plans. One per thread that calls it."""

    def __init__(self, compiled: Any, concat: bool) -> None:
        import openvino as ov

        self.compiled, self.concat = compiled, concat
        self.request = compiled.create_infer_request()
        self.queue = ov.AsyncInferQueue(compiled, int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
        self.queue.set_callback(self._finished)
        self.results: dict[int, list[np.ndarray]] = {}
        self.count = len(compiled.outputs)

    def _finished(self, request: Any, index: int) -> None:
        self.results[index] = [np.copy(request.get_output_tensor(i).data) for i in range(self.count)]

    def __call__(self, requests: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        if self.concat and len(requests) > 1:
            sizes = np.cumsum([row[0].shape[0] for row in requests])[:-1]
            joined = self.request.infer([np.concatenate(column) for column in zip(*requests, strict=True)])
            split = [np.split(joined[port], sizes) for port in self.compiled.outputs]
            return [list(row) for row in zip(*split, strict=True)]
        self.results = {}
        for index, row in enumerate(requests):
            self.queue.start_async(row, index, share_inputs=True)
        self.queue.wait_all()
        return [self.results[index] for index in range(len(requests))]


def dims(port: Any, group: int) -> list[int]:
    """A tensor's shape as Triton's config states it: without the batch dimension where requests are gathered."""
    shape = [-1 if d.is_dynamic else d.get_length() for d in port.get_partial_shape()]
    return shape[1:] if group > 0 else shape


# -- Triton's own server binary --------------------------------------------------------------------------------


def model_repository(root: Path, args: argparse.Namespace) -> None:
    """`<root>/<name>/config.pbtxt` and `<root>/<name>/1/model.py`."""
    import openvino as ov

    model = ov.Core().read_model(str(args.xml))
    folder = root / args.name
    (folder / "1").mkdir(parents=True)
    shutil.copy(BENCH / "serving_triton_model.py", folder / "1" / "model.py")

    def tensors(ports: Any) -> str:
        rows = [f'{{ name: "{p.get_any_name()}" data_type: TYPE_FP32 dims: {dims(p, args.group)} }}' for p in ports]
        return "[ " + ", ".join(rows) + " ]"

    parameters = {"bench": str(BENCH), "xml": str(args.xml), "join": args.join}
    lines = [
        f'name: "{args.name}"',
        'backend: "python"',
        f"max_batch_size: {args.group}",
        f"input {tensors(model.inputs)}",
        f"output {tensors(model.outputs)}",
        f"instance_group [ {{ count: {args.instances} kind: KIND_CPU }} ]",
        *[
            f"parameters {{ key: {json.dumps(k)} value: {{ string_value: {json.dumps(v)} }} }}"
            for k, v in parameters.items()
        ],
    ]
    if args.group > 0:
        lines.append(f"dynamic_batching {{ max_queue_delay_microseconds: {int(args.delay_ms * 1000)} }}")
    (folder / "config.pbtxt").write_text("\n".join(lines) + "\n")


def serve_triton_server(args: argparse.Namespace) -> None:
    """tritonserver on a model repository and a backends directory of its own; the Python backend's stub is
    the one PyTriton ships for this Python, and it finds this venv's packages through the venv's python on
    PATH (as PyTriton runs it)."""
    import pytriton  # type: ignore[import-not-found, unused-ignore]
    from serving_servers import until_terminated, wait_ready

    dist = Path(pytriton.__file__).resolve().parent / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    with tempfile.TemporaryDirectory(prefix="triton-server-") as scratch:
        root = Path(scratch)
        backend = root / "backends" / "python"
        backend.mkdir(parents=True)
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            (backend / name).symlink_to(dist / "backends" / "python" / name)
        shutil.copy(dist / "python_backend_stubs" / version / "triton_python_backend_stub", backend)
        model_repository(root / "models", args)
        env = dict(os.environ)
        libraries = [str(dist.parent.parent / "nvidia_pytriton.libs"), str(sysconfig.get_config_var("LIBDIR"))]
        env["LD_LIBRARY_PATH"] = ":".join([*libraries, env.get("LD_LIBRARY_PATH", "")])
        env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
        command = [str(dist / "bin" / "tritonserver"), f"--model-repository={root / 'models'}",
                   f"--backend-directory={root / 'backends'}", f"--http-address={HOST}", f"--http-port={args.port}",
                   "--allow-grpc=false", "--allow-metrics=false", "--log-verbose=0"]  # fmt: skip
        server = subprocess.Popen(command, env=env)
        try:
            wait_ready(args.port, args.name, timeout=120.0)
            until_terminated()
        finally:
            server.terminate()
            server.wait(20)


# -- PyTriton, tuned -------------------------------------------------------------------------------------------


def serve_pytriton_tuned(args: argparse.Namespace) -> None:
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor  # type: ignore[import-not-found, unused-ignore]
    from pytriton.triton import Triton, TritonConfig  # type: ignore[import-not-found, unused-ignore]
    from serving_servers import until_terminated, wait_ready

    concat = args.join == "concat"
    compiled = compiled_for(args.xml, concat)
    inputs = [port.get_any_name() for port in compiled.inputs]
    outputs = [port.get_any_name() for port in compiled.outputs]

    def instance() -> Any:
        run = Runner(compiled, concat)

        def infer(requests: list[Any]) -> list[dict[str, np.ndarray]]:
            answers = run([[request[name] for name in inputs] for request in requests])
            return [dict(zip(outputs, row, strict=True)) for row in answers]

        return infer

    def spec(port: Any) -> Any:
        return Tensor(name=port.get_any_name(), dtype=np.float32, shape=tuple(dims(port, args.group)))

    config = TritonConfig(http_address=HOST, http_port=args.port, grpc_port=args.port + 1, metrics_port=args.port + 2,
                          allow_metrics=False)  # fmt: skip
    with Triton(config=config) as triton:
        triton.bind(
            model_name=args.name,
            infer_func=[instance() for _ in range(args.instances)],
            inputs=[spec(port) for port in compiled.inputs],
            outputs=[spec(port) for port in compiled.outputs],
            config=ModelConfig(batching=args.group > 0, max_batch_size=args.group,
                               batcher=DynamicBatcher(max_queue_delay_microseconds=int(args.delay_ms * 1000))),
            strict=False,
        )  # fmt: skip
        triton.run()
        wait_ready(args.port, args.name)
        until_terminated()


# -- FastAPI with an AsyncInferQueue ---------------------------------------------------------------------------


def serve_fastapi_async(args: argparse.Namespace) -> None:
    import threading

    import uvicorn
    from serving_servers import wait_ready

    os.environ["FASTAPI_ASYNC_MODEL_XML"] = str(args.xml)
    from serving_fastapi_async import app

    config = uvicorn.Config(app, host=HOST, port=args.port, http="httptools", loop="uvloop", log_level="warning",
                            access_log=False)  # fmt: skip
    threading.Thread(target=wait_ready, args=(args.port, args.name), daemon=True).start()
    uvicorn.Server(config).run()


# -- LitServe --------------------------------------------------------------------------------------------------


def serve_litserve(args: argparse.Namespace) -> None:
    """LitServe on the infer route (serving_litserve.py), its readiness on the model's ready route."""
    import litserve as ls  # type: ignore[import-not-found, unused-ignore]
    from serving_litserve import OpenVinoApi

    api = OpenVinoApi(args.xml, args.name, args.join == "concat", max_batch_size=max(args.group, 1),
                      batch_timeout=args.delay_ms / 1000, api_path=f"/v2/models/{args.name}/infer")  # fmt: skip
    server = ls.LitServer(api, accelerator="cpu", devices=1, workers_per_device=args.workers, fast_queue=True,
                          healthcheck_path=f"/v2/models/{args.name}/ready", timeout=30)  # fmt: skip
    server.run(host=HOST, port=args.port, num_api_servers=1, generate_client_file=False, log_level="warning",
               http="httptools", loop="uvloop", access_log=False)  # fmt: skip
