"""The model of `serving.py`'s triton-server side: a Triton Python-backend model (`model.py`) running OpenVINO.

Triton's dynamic batcher hands `execute` the requests it gathered; serving_competitors.Runner runs them,
joined into one batch or side by side on an AsyncInferQueue as the model's `join` parameter says. The
parameters (`bench`, `xml`, `join`) come from the config.pbtxt that serving_competitors.py writes.
"""

import json
import sys
from pathlib import Path

import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found, unused-ignore]


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config["parameters"].items()}
        sys.path.insert(0, parameters["bench"])
        from serving_competitors import Runner, compiled_for

        concat = parameters["join"] == "concat"
        compiled = compiled_for(Path(parameters["xml"]), concat)
        self.inputs = [port.get_any_name() for port in compiled.inputs]
        self.outputs = [port.get_any_name() for port in compiled.outputs]
        self.run = Runner(compiled, concat)

    def execute(self, requests: list) -> list:  # type: ignore[type-arg]
        rows = self.run(
            [[pb_utils.get_input_tensor_by_name(r, name).as_numpy() for name in self.inputs] for r in requests]
        )
        return [
            pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(n, a) for n, a in zip(self.outputs, row, strict=True)]
            )
            for row in rows
        ]
