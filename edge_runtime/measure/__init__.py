"""Measuring how a model runs here: latency and throughput (`benchmark`), agreement with the fp32 reference
(`fidelity`), and whether an int8 variant's recorded accuracy holds on this box's CPU (`int8_check`)."""
