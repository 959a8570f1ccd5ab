"""Answering requests: request → batch → infer → respond.

`protocol` reads and writes the Open Inference Protocol, `batching` joins requests into batches per
model where `batch_choice` found that sound and worth it, `served` turns an image into the result
message a pipeline would publish, `http` is the endpoint, `openapi` its description, and `service`
the part of the daemon that runs them.
"""
