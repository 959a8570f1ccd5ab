"""The stats report, in the pieces the daemon puts together: one pipeline's figures, and the log's stats lines.

The same report feeds the stats topic, the Prometheus endpoint (`service.metrics`) and the log, so each
figure is computed once, here, and the three cannot disagree.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from edge_runtime.pipeline.streaming import Pipeline
from edge_runtime.service.stats import RateMeter, snapshot_dict
from edge_runtime.sources.shared import SharedSourceConsumer

__all__ = ["log_stats", "pipeline_figures", "shared_source_of"]

log = logging.getLogger("edge_runtime")


def shared_source_of(pipeline: Pipeline) -> str | None:
    """The camera in `sources:` the pipeline reads, or None for a source of its own."""
    source = pipeline.source
    return source.source_name if isinstance(source, SharedSourceConsumer) else None


def pipeline_figures(pipeline: Pipeline, meter: RateMeter, select_fastest: Mapping[str, Any] | None) -> dict[str, Any]:
    """Rates, counts and latencies of one pipeline, what runs its model and how its source fares.
    `select_fastest`: where the box's measurement of the model stands, for a model set to `select: fastest`."""
    source = pipeline.source.stats
    figures = snapshot_dict(pipeline.stats, meter, source.delivered, source.dropped)
    runs_on = pipeline.model.backend.runs_on
    figures["runtime"] = {
        "backend": runs_on.backend,
        "device": runs_on.device,
        "precision": runs_on.precision,
        "variant": pipeline.model.variant_id,
    }
    if select_fastest is not None:
        figures["runtime"]["select_fastest"] = dict(select_fastest)
    figures["source"] = {
        "connected": source.connected,
        "reconnects": source.reconnects,
        "outages": source.outages,
        "malformed": source.malformed,
    }
    shared = shared_source_of(pipeline)
    if shared is not None:
        figures["source"]["shared"] = shared
    return figures


def log_stats(report: Mapping[str, Any], pipelines: Mapping[str, Pipeline], source_outages: Mapping[str, str]) -> None:
    """One line per camera away, and one per pipeline: its rates, or where its source is when it is away."""
    for source_name, source_outage in source_outages.items():
        log.info("stats source %s: %s", source_name, source_outage)
    for name, figures in report["pipelines"].items():
        pipeline = pipelines.get(name)
        outage = pipeline.source.outage() if pipeline is not None else None
        if outage is not None:
            log.info("stats %s: source %s; %d results so far", name, outage, figures["results"])
            continue
        progress = pipeline.source.progress() if pipeline is not None else None
        infer = figures["latency_ms"].get("infer", {})
        log.info(
            "stats %s: %.1f fps in, %.1f out, %d dropped, infer p50 %s ms, spool %d%s",
            name,
            figures["fps_in"],
            figures["fps_out"],
            figures["dropped"],
            infer.get("p50", "-"),
            report["mqtt"]["spool_depth"],
            "" if progress is None else f"; {progress}",
        )
