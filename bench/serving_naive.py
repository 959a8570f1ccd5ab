"""The naive server of `serving.py`: FastAPI + uvicorn calling the compiled model once per request.

What a user writes first: the model compiled as `compile_model(path, "CPU")` compiles it (the latency
hint; fp32 stated), one handler that reads the Open Inference Protocol's binary request, calls the
model and answers. No batching and one request in flight, since the handler holds the event loop while
the model runs. Run by `serving_servers.py naive`; kept apart so that FastAPI sees its annotations.
"""

import os
from pathlib import Path

import openvino as ov
from fastapi import FastAPI, Request, Response  # type: ignore[import-not-found, unused-ignore]
from serving_tensors import HEADER_LENGTH, answer, read_request

MODEL = Path(os.environ["NAIVE_MODEL_XML"])

compiled = ov.Core().compile_model(str(MODEL), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
app = FastAPI()


@app.get("/v2/models/{name}/ready")  # type: ignore[untyped-decorator, misc, unused-ignore]
async def ready(name: str) -> dict[str, bool]:
    return {"ready": True}


@app.post("/v2/models/{name}/infer")  # type: ignore[untyped-decorator, misc, unused-ignore]
async def infer(name: str, request: Request) -> Response:
    arrays = read_request(await request.body(), int(request.headers[HEADER_LENGTH]))
    results = compiled(arrays)
    body, headers = answer(name, [(port.get_any_name(), results[port]) for port in compiled.outputs])
    return Response(body, media_type="application/octet-stream", headers=headers)
