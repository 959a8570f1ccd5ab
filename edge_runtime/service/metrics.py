"""The daemon's figures as a Prometheus endpoint (loopback by default).

The collector reads the same report the stats topic publishes, at scrape time, so the two never
disagree and nothing is counted twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from edge_runtime.errors import ConfigError

Report = Callable[[], dict[str, Any]]

_PIPELINE_COUNTERS = {
    "frames_in": "frames or windows delivered by the source",
    "dropped": "frames dropped by the source (stale, rate limit, no motion)",
    "results": "inferences decoded",
    "published": "result messages handed to the publisher",
    "filtered": "results not published (unchanged or below the score threshold)",
    "errors": "failed inferences or decodes",
    "crops": "crops run through the pipeline's cascade models",
    "crops_failed": "crops skipped by the cascade because preprocessing them failed",
}
_PIPELINE_GAUGES = {"fps_in": "input rate over the last interval", "fps_out": "result rate over the last interval"}
_SOURCE_COUNTERS = {
    "frames_captured": "frames grabbed from a camera named in sources:, for all its pipelines",
    "decoded": "frames of a named camera decoded for at least one pipeline",
    "reconnects": "times a named camera came back after an outage",
    "outages": "outages of a named camera",
}
_SOURCE_GAUGES = {"connected": "1 while a named camera delivers", "fps_captured": "frames grabbed per second"}
_MQTT_GAUGES = {
    "connected": "1 while connected to the broker",
    "spool_depth": "results waiting in the spool",
    "spool_bytes": "bytes waiting in the spool",
    "in_flight": "results sent but not yet acknowledged",
}
_MQTT_COUNTERS = {
    "reconnects": "broker reconnections",
    "broker_moves": "connections made to another broker node than the one before",
    "held_qos": "sends skipped because the broker takes a lower QoS than the message's (they stay spooled)",
    "dropped": "results dropped from a full or aged spool",
    "requests_dropped": "inference requests dropped unanswered: no usable reply topic, or a fault",
}
_ROLLOUT_COUNTERS = {
    "archives_refused": "rollout archives refused before unpacking (links, escaping paths, setuid bits, bombs)",
}
_SERVING_COUNTERS = {
    "request_success": "requests answered with outputs",
    "request_failure": "requests answered with an error",
    "rejected_queue_full": "requests refused because the queue was full",
    "timed_out_in_queue": "requests that waited past their timeout and never ran",
    "inference_count": "samples inferred (over execution_count: the mean batch size)",
    "execution_count": "batches (or single requests) run on the backend",
    "direct_count": "single requests started from the thread that read them, finding the backend idle",
    "prepare_ms_total": "milliseconds spent reading requests into input tensors (parsing, image decoding), summed",
    "queue_ms_total": "milliseconds requests spent queued, summed",
    "compute_ms_total": "milliseconds executions took, summed",
    "respond_ms_total": "milliseconds spent turning outputs into answers (encoding, decoding results), summed",
}


class DaemonCollector(Collector):
    def __init__(self, report: Report) -> None:
        self._report = report

    def collect(self) -> Iterator[Metric]:
        report = self._report()
        pipelines: dict[str, dict[str, Any]] = report.get("pipelines", {})
        yield from _pipeline_metrics(pipelines)
        yield from _source_metrics(report.get("sources", {}))
        yield from _serving_metrics(report.get("serving", {}))
        if "serving_refused" in report:
            unknown = report["serving_refused"]["unknown_model"]
            text = "inference requests over HTTP or MQTT for a model this box does not serve (answered 404)"
            yield CounterMetricFamily("edge_runtime_serving_unknown_model_requests", text, value=float(unknown))
        rollout: dict[str, Any] = report.get("rollout", {})
        for key, text in _ROLLOUT_COUNTERS.items():
            if key in rollout:
                yield CounterMetricFamily(f"edge_runtime_rollout_{key}", text, value=float(rollout[key]))
        mqtt: dict[str, Any] = report.get("mqtt", {})
        for key, text in _MQTT_GAUGES.items():
            if key in mqtt:
                yield GaugeMetricFamily(f"edge_runtime_mqtt_{key}", text, value=float(mqtt[key]))
        for key, text in _MQTT_COUNTERS.items():
            if key in mqtt:
                yield CounterMetricFamily(f"edge_runtime_mqtt_{key}", text, value=float(mqtt[key]))
        if "broker" in mqtt:
            broker = GaugeMetricFamily(
                "edge_runtime_mqtt_broker", "1 for the broker node connected to, or being tried", labels=["broker"]
            )
            broker.add_metric([str(mqtt["broker"])], 1.0)
            yield broker


def _labelled(
    family: type[CounterMetricFamily] | type[GaugeMetricFamily],
    prefix: str,
    described: dict[str, str],
    label: str,
    rows: dict[str, dict[str, Any]],
) -> Iterator[Metric]:
    """One family per figure in `described`, with a sample per row (pipeline, camera, model) labelled by its name;
    a row without the figure gives 0."""
    for key, text in described.items():
        metric = family(f"{prefix}{key.removesuffix('_total')}", text, labels=[label])
        for name, figures in rows.items():
            metric.add_metric([name], float(figures.get(key, 0)))
        yield metric


def _pipeline_metrics(pipelines: dict[str, dict[str, Any]]) -> Iterator[Metric]:
    yield from _labelled(CounterMetricFamily, "edge_runtime_", _PIPELINE_COUNTERS, "pipeline", pipelines)
    yield from _labelled(GaugeMetricFamily, "edge_runtime_", _PIPELINE_GAUGES, "pipeline", pipelines)
    latency = GaugeMetricFamily(
        "edge_runtime_stage_latency_ms", "stage latency percentiles", labels=["pipeline", "stage", "quantile"]
    )
    info = GaugeMetricFamily(
        "edge_runtime_pipeline_info", "what runs each pipeline", labels=["pipeline", "backend", "device", "precision"]
    )
    for name, figures in pipelines.items():
        for stage, quantiles in figures.get("latency_ms", {}).items():
            for quantile, value in quantiles.items():
                latency.add_metric([name, stage, quantile.removeprefix("p")], float(value))
        runtime = figures.get("runtime", {})
        labels = [name, runtime.get("backend", ""), runtime.get("device", ""), runtime.get("precision", "")]
        info.add_metric(labels, 1.0)
    yield latency
    yield info


def _source_metrics(sources: dict[str, dict[str, Any]]) -> Iterator[Metric]:
    """The cameras named in `sources:`, each once however many pipelines read it."""
    if not sources:
        return
    yield from _labelled(CounterMetricFamily, "edge_runtime_source_", _SOURCE_COUNTERS, "source", sources)
    yield from _labelled(GaugeMetricFamily, "edge_runtime_source_", _SOURCE_GAUGES, "source", sources)


def _serving_metrics(models: dict[str, dict[str, Any]]) -> Iterator[Metric]:
    if not models:
        return
    yield from _labelled(CounterMetricFamily, "edge_runtime_serving_", _SERVING_COUNTERS, "model", models)
    sizes = CounterMetricFamily("edge_runtime_serving_batches", "executions by batch size", labels=["model", "size"])
    for name, figures in models.items():
        for size, count in figures.get("batch_sizes", {}).items():
            sizes.add_metric([name, size], float(count))
    yield sizes


def serve_metrics(report: Report, host: str, port: int) -> Callable[[], None]:
    """Start the endpoint; returns the function that stops it."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry()
    registry.register(DaemonCollector(report))
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as error:  # another program holds the port: the config checks cannot know that
        raise ConfigError(f"stats.prometheus.port: cannot listen on {host}:{port}: {error.strerror}") from None

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5)

    return stop
