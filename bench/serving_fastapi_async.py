"""The fastapi-async server of `serving.py`: FastAPI + uvicorn whose route never blocks its event loop.

The model is compiled under the throughput hint (OpenVINO's streams keep every core busy with requests side
by side) and run through an `AsyncInferQueue` of as many infer requests as OpenVINO plans. The route reads
the binary request, starts it on the queue and awaits a future that the queue's callback, on OpenVINO's
thread, resolves through `loop.call_soon_threadsafe`; a semaphore as deep as the queue makes sure that
`start_async` always finds an idle infer request, so that it never waits on the event loop either. Run by
`serving_servers.py fastapi-async` on uvicorn with uvloop and httptools; kept apart so that FastAPI sees its
annotations.
"""

import asyncio
import os
from typing import Any

import numpy as np
import openvino as ov
from fastapi import FastAPI, Request, Response  # type: ignore[import-not-found, unused-ignore]
from serving_tensors import HEADER_LENGTH, answer, read_request

core = ov.Core()
compiled = core.compile_model(
    os.environ["FASTAPI_ASYNC_MODEL_XML"], "CPU", {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_PRECISION_HINT": "f32"}
)
queue = ov.AsyncInferQueue(compiled, int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
names = [port.get_any_name() for port in compiled.outputs]
app = FastAPI()
free: asyncio.Semaphore | None = None


def finished(request: ov.InferRequest, userdata: tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]) -> None:
    """On OpenVINO's thread: copy the outputs out of the infer request, which is reused, and wake the route."""
    loop, future = userdata
    outputs = [np.copy(request.get_output_tensor(i).data) for i in range(len(names))]
    loop.call_soon_threadsafe(future.set_result, outputs)


queue.set_callback(finished)


@app.get("/v2/models/{name}/ready")  # type: ignore[untyped-decorator, misc, unused-ignore]
async def ready(name: str) -> dict[str, bool]:
    return {"ready": True}


@app.post("/v2/models/{name}/infer")  # type: ignore[untyped-decorator, misc, unused-ignore]
async def infer(name: str, request: Request) -> Response:
    global free
    if free is None:
        free = asyncio.Semaphore(len(queue))
    arrays = read_request(await request.body(), int(request.headers[HEADER_LENGTH]))
    loop = asyncio.get_running_loop()
    future: asyncio.Future[list[np.ndarray]] = loop.create_future()
    async with free:
        queue.start_async(arrays, (loop, future), share_inputs=True)
        outputs = await future
    body, headers = answer(name, list(zip(names, outputs, strict=True)))
    return Response(body, media_type="application/octet-stream", headers=headers)
