"""schemathesis against the served OpenAPI document: no 5xx, and every response as the document says."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode

from edge_runtime.serving.service import Serving

CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance, content_type_conformance]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_generated_requests_get_no_server_error_and_documented_responses(
    start_serving: Callable[..., Serving], batch_classifier: Path, face_package: Path, mode: GenerationMode
) -> None:
    """Requests the document allows (positive) and requests it does not (negative), against both kinds of model.

    That a request the document allows is accepted is not checked: the document cannot say which
    shapes each model takes, so such a request is often answered 400, as it should be.
    """
    models = [{"name": "classifier", "path": str(batch_classifier)}, {"name": "faces", "path": str(face_package)}]
    serving = start_serving(models, max_body_bytes=1 << 20)
    url = f"http://127.0.0.1:{serving.port}"
    schema = schemathesis.openapi.from_url(f"{url}/v2/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 9
    if mode is GenerationMode.NEGATIVE:  # a route without parameters or body has nothing to get wrong
        operations = [op for op in operations if op.path_parameters or list(op.body)]
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def call(case: schemathesis.Case) -> None:
            case.call_and_validate(base_url=url, checks=CHECKS)

        call()
