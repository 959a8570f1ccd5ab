"""The LitServe API of `serving.py`'s litserve side, in a module of its own since LitServe's worker processes
are spawned and import it by name.

LitServe's routes read a JSON or form body (a form where `decode_request` takes a `Request`: annotations
are not postponed here, since LitServe reads that one to decide), so the request is a multipart/form-data
body whose `request` part is the same binary tensor request the other sides are sent (its header's length
in the `header_length` part); the answer is the same binary response. LitServe's batcher gathers up to
`max_batch_size` requests within `batch_timeout`; `batch` keeps them apart and serving_competitors.Runner
runs them, joined or side by side.
"""

from pathlib import Path
from typing import Any

import litserve as ls  # type: ignore[import-not-found, unused-ignore]
import numpy as np
from serving_competitors import Runner, compiled_for
from serving_tensors import answer, read_request
from starlette.requests import Request
from starlette.responses import Response


class OpenVinoApi(ls.LitAPI):  # type: ignore[misc, unused-ignore]
    def __init__(self, xml: Path, name: str, concat: bool, **options: Any) -> None:
        super().__init__(**options)
        self.xml, self.name, self.concat = xml, name, concat

    def setup(self, device: str) -> None:
        compiled = compiled_for(self.xml, self.concat)
        self.names = [port.get_any_name() for port in compiled.outputs]
        self.run = Runner(compiled, self.concat)

    def decode_request(self, request: Request) -> list[np.ndarray]:
        return read_request(request["request"].file.read(), int(request["header_length"]))

    def batch(self, inputs: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        return inputs

    def predict(self, x: Any) -> Any:
        return self.run(x) if self.max_batch_size > 1 else self.run([x])[0]

    def unbatch(self, output: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        return output

    def encode_response(self, output: list[np.ndarray]) -> Response:
        body, headers = answer(self.name, list(zip(self.names, output, strict=True)))
        return Response(body, media_type="application/octet-stream", headers=headers)
