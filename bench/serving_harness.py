"""What `serving.py` runs its measurements with: the bench's venv, the models and their requests, the
server processes, the load generator process, and the model's own latency and throughput in-process.

Each server and the load generator are processes of their own (the generator never shares an
interpreter, nor a GIL, with a server); a server runs in its own session, so stopping it stops what it
started too (Triton's server and its Python backend stubs).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import sysconfig
import time
import urllib.request
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import IO, Any

import cv2
import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
CACHE = BENCH / ".cache" / "serving"
VENV = BENCH / ".cache" / "triton-venv"
PYTRITON = "nvidia-pytriton==0.5.14"  # embeds Triton Inference Server 2.51.0
LITSERVE = "litserve==0.2.19"
GRANIAN = "granian==2.8.7"
HOST = "127.0.0.1"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def venv_python() -> Path:
    """The bench's own venv (PyTriton pins numpy and tritonclient versions of its own), made on first use:
    the competitors (PyTriton, whose wheel also ships Triton's server binary; FastAPI on uvicorn with
    httptools and uvloop; LitServe, with python-multipart for its form bodies; granian for the HTTP stack
    bench) and the load generator's aiohttp, hdrhistogram and paho-mqtt."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".serving-stamp"
    wanted = (
        f"{PYTRITON} openvino=={version('openvino')} fastapi uvicorn[standard] {LITSERVE} python-multipart"
        f" {GRANIAN} hdrhistogram aiohttp paho-mqtt"
    )
    if stamp.is_file() and stamp.read_text() == wanted:
        return python
    print(f"setting up {VENV} (once): {wanted}", flush=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *wanted.split()], check=True)
    stamp.write_text(wanted)
    return python


def libpython_dir() -> str:
    """Where the Python's shared library lies: Triton's Python backend stub links against it."""
    return str(sysconfig.get_config_var("LIBDIR"))


def free_port(span: int = 1) -> int:
    """A port with `span` free ports from it (Triton takes HTTP, gRPC and metrics ports in a row)."""
    while True:
        with socket.socket() as probe:
            probe.bind((HOST, 0))
            port = int(probe.getsockname()[1])
        if port + span < 65536 and all(_free(port + i) for i in range(1, span)):
            return port


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


# -- the models and their requests ---------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    name: str
    title: str
    package: Path
    max_batch_size: int  # 0: requests are not joined (the graph folds the batch into another dimension)
    why_unbatched: str = ""

    @property
    def xml(self) -> Path:
        return self.package / "openvino" / "fp32" / "model.xml"

    def write_requests(self) -> None:
        """Request bodies in CACHE: binary tensor requests (`<name>.tensor`) and a JPEG (`<name>.jpeg`)."""
        import openvino as ov

        port = ov.Core().read_model(str(self.xml)).inputs[0]
        shape = [int(d) for d in port.get_shape()]
        array = np.random.default_rng(0).random(shape, dtype=np.float32)
        header = {
            "inputs": [{"name": port.get_any_name(), "shape": shape, "datatype": "FP32",
                        "parameters": {"binary_data_size": array.nbytes}}],
            "parameters": {"binary_data_output": True},
        }  # fmt: skip
        head = json.dumps(header).encode()
        CACHE.mkdir(parents=True, exist_ok=True)
        (CACHE / f"{self.name}.tensor").write_bytes(head + array.tobytes())
        (CACHE / f"{self.name}.tensor.json").write_text(json.dumps({"header_length": len(head)}))
        from models import camera_frame

        ok, jpeg = cv2.imencode(".jpg", camera_frame(), [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        (CACHE / f"{self.name}.jpeg").write_bytes(jpeg.tobytes())

    def tensor_request(self) -> tuple[str, dict[str, str]]:
        length = json.loads((CACHE / f"{self.name}.tensor.json").read_text())["header_length"]
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(length)}
        return str(CACHE / f"{self.name}.tensor"), headers

    def multipart_request(self) -> tuple[str, dict[str, str]]:
        """The binary tensor request as the `request` part of a multipart/form-data body (for LitServe, whose
        routes read JSON or forms), its header's length in the `header_length` part: 257 bytes more."""
        tensor, headers = self.tensor_request()
        boundary = "serving-bench-boundary"
        head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"header_length\"\r\n\r\n"
                f"{headers['Inference-Header-Content-Length']}\r\n--{boundary}\r\n"
                'Content-Disposition: form-data; name="request"; filename="request.bin"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n")  # fmt: skip
        path = CACHE / f"{self.name}.multipart"
        path.write_bytes(head.encode() + Path(tensor).read_bytes() + f"\r\n--{boundary}--\r\n".encode())
        return str(path), {"Content-Type": f"multipart/form-data; boundary={boundary}"}

    def request_for(self, side: str) -> tuple[str, dict[str, str]]:
        return self.multipart_request() if side == "litserve" else self.tensor_request()

    def image_request(self) -> tuple[str, dict[str, str]]:
        return str(CACHE / f"{self.name}.jpeg"), {"Content-Type": "image/jpeg"}


def bench_models(names: list[str]) -> list[Model]:
    from models import FACE_PACKAGE, mobilenet_v2_package

    found = []
    if "mobilenet_v2" in names:
        package = CACHE / "mobilenet_v2"
        if not (package / "openvino" / "fp32" / "model.xml").is_file():
            mobilenet_v2_package(package)
        found.append(Model("mobilenet_v2", "MobileNetV2 1.0 (224×224 fp32, seeded weights)", package, 8))
    if "face" in names:
        why = "its outputs fold the batch into their second dimension ([1, 896·N, 16])"
        found.append(Model("face", "face_detection_short_range (128×128 fp32)", FACE_PACKAGE, 0, why))
    return found


# -- processes -----------------------------------------------------------------------------------------


def session_cpu_seconds(session: int) -> float:
    """CPU time (user and system) so far of every process in a session, its reaped children included."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # the session id (field 6)
            total += sum(int(field) for field in fields[11:15])  # utime, stime, cutime, cstime
    return total / CLOCK_TICKS


PROJECT_SIDES = ("edge", "edge-latency")  # run in the project's venv; the others in the bench's


class Server:
    """One side's server process, ready to answer once constructed; `stop` ends its whole session."""

    def __init__(self, side: str, model: Model, delay_ms: float, log: Path, mqtt_port: int | None = None) -> None:
        from serving_competitors import tuning

        self.side = side
        self.port = free_port(3)
        env = dict(os.environ)
        if side in PROJECT_SIDES:
            python, env["PYTHONPATH"] = sys.executable, str(REPO)
            where = ["--package", str(model.package)] + (["--hint", "latency"] if side == "edge-latency" else [])
        else:
            python, env["LD_LIBRARY_PATH"] = str(venv_python()), libpython_dir()
            where = ["--xml", str(model.xml)]
        command = [python, str(BENCH / "serving_servers.py"), "edge" if side in PROJECT_SIDES else side]
        command += ["--name", model.name, *where, "--port", str(self.port)]
        command += [
            "--max-batch-size",
            str(model.max_batch_size),
            "--delay-ms",
            str(delay_ms),
            *tuning(side, model.name),
        ]
        if mqtt_port is not None:
            command += ["--mqtt-port", str(mqtt_port)]
        with log.open("ab") as out:
            out.write(f"\n$ {' '.join(command)}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.url = f"http://{HOST}:{self.port}/v2/models/{model.name}/infer"
        self.ready_url = f"http://{HOST}:{self.port}/v2/models/{model.name}/ready"
        deadline = time.monotonic() + 150
        try:
            while not self._ready():
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the {side} server did not start; see {log}")
                time.sleep(0.2)
        except BaseException:
            self.stop()  # also when the bench itself is stopped meanwhile
            raise

    def cpu_seconds(self) -> float:
        """CPU time so far of the server's processes: the server, Triton's Python stubs, LitServe's workers."""
        return session_cpu_seconds(self.process.pid)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.ready_url, timeout=1) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        for sig, wait in ((signal.SIGTERM, 8), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(wait)
                os.killpg(self.process.pid, 0)  # children of the session may outlive its leader
                time.sleep(0.5)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass


class LoadGenerator:
    """`serving_load.py` in the bench's venv: one command in, one JSON answer out."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [str(venv_python()), str(BENCH / "serving_load.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, **command: Any) -> dict[str, Any]:
        stdin: IO[str] | None = self.process.stdin
        stdout: IO[str] | None = self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise SystemExit(f"the load generator ended (exit {self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(10)


# -- the model on its own ------------------------------------------------------------------------------


def model_alone(model: Model, seconds: float) -> dict[str, float]:
    """Median synchronous latency of one request (ms), compiled as the servers compile it and under the
    latency hint, on the same input; the throughput (inferences/s) of OpenVINO's async queue; and the CPU
    time one inference costs in-process (ms, all threads), synchronously under each hint and in the queue:
    what a server's CPU time per request holds besides serving it."""
    import openvino as ov

    core = ov.Core()
    ir = core.read_model(str(model.xml))
    array = np.random.default_rng(0).random([int(d) for d in ir.inputs[0].get_shape()], dtype=np.float32)
    if model.max_batch_size > 0:
        ir.reshape({port: ov.PartialShape([ov.Dimension(), *list(port.get_partial_shape())[1:]]) for port in ir.inputs})
    f32 = {"INFERENCE_PRECISION_HINT": "f32"}
    result = {}
    for name, hint in (("sync_served", "THROUGHPUT"), ("sync_latency_hint", "LATENCY")):
        request = core.compile_model(ir, "CPU", {"PERFORMANCE_HINT": hint, **f32}).create_infer_request()
        for _ in range(30):
            request.infer([array])
        times, cpu = [], time.process_time()
        for _ in range(300):
            started = time.perf_counter()
            request.infer([array])
            times.append((time.perf_counter() - started) * 1000)
        result[f"{name}_cpu_ms"] = (time.process_time() - cpu) / 300 * 1000
        result[f"{name}_ms"] = statistics.median(times)
    compiled = core.compile_model(ir, "CPU", {"PERFORMANCE_HINT": "THROUGHPUT", **f32})
    queue = ov.AsyncInferQueue(compiled, int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
    done, started, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - started < seconds:
        for _ in range(64):
            queue.start_async([array])
        queue.wait_all()
        done += 64
    result["async_fps"] = done / (time.perf_counter() - started)
    result["async_cpu_ms"] = (time.process_time() - cpu) / done * 1000
    return result


def load_average() -> float:
    return os.getloadavg()[0]
