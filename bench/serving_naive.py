"""The naive server of `serving.py`: FastAPI + uvicorn calling the compiled model once per request.

What a user writes first: the model compiled as `compile_model(path, "CPU")` compiles it (the latency
hint; fp32 stated), one handler that reads the Open Inference Protocol's binary request, calls the
model and answers. No batching and one request in flight, since the handler holds the event loop while
the model runs. Run by `serving_servers.py naive`; kept apart so that FastAPI sees its annotations.
"""

import json
import os
from pathlib import Path

import numpy as np
import openvino as ov
from fastapi import FastAPI, Request, Response  # type: ignore[import-not-found, unused-ignore]

MODEL = Path(os.environ["NAIVE_MODEL_XML"])

compiled = ov.Core().compile_model(str(MODEL), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
app = FastAPI()


@app.get("/v2/models/{name}/ready")  # type: ignore[untyped-decorator, misc, unused-ignore]
async def ready(name: str) -> dict[str, bool]:
    return {"ready": True}


@app.post("/v2/models/{name}/infer")  # type: ignore[untyped-decorator, misc, unused-ignore]
async def infer(name: str, request: Request) -> Response:
    body = await request.body()
    length = int(request.headers["inference-header-content-length"])
    header = json.loads(body[:length])
    arrays, offset = [], length
    for tensor in header["inputs"]:
        size = tensor["parameters"]["binary_data_size"]
        arrays.append(np.frombuffer(body, np.float32, size // 4, offset).reshape(tensor["shape"]))
        offset += size
    results = compiled(arrays)
    rows, chunks = [], []
    for port in compiled.outputs:
        data = results[port].tobytes()
        shape = list(results[port].shape)
        rows.append(
            {
                "name": port.get_any_name(),
                "datatype": "FP32",
                "shape": shape,
                "parameters": {"binary_data_size": len(data)},
            }
        )
        chunks.append(data)
    head = json.dumps({"model_name": name, "outputs": rows}).encode()
    headers = {"Inference-Header-Content-Length": str(len(head))}
    return Response(head + b"".join(chunks), media_type="application/octet-stream", headers=headers)
