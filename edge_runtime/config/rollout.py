"""The `rollout:` section of the daemon's config: how a new model release is fetched and judged on this box.

Every figure has a default a small box can live with; an operator tightens them for a fleet where a
bad model costs more than a slow rollout.
"""

from __future__ import annotations

from pydantic import Field

from edge_runtime.config.base import StrictModel

__all__ = ["ProbationSettings", "RolloutSettings", "ShadowSettings"]


class ShadowSettings(StrictModel):
    items: int = Field(default=50, ge=1, le=100_000, description="items the new model runs beside the old one")
    max_seconds: float = Field(default=120.0, gt=0, description="judged on what it ran by then")
    min_items: int = Field(default=5, ge=1, description="fewer items by the deadline fails the rollout")
    max_latency_ratio: float = Field(default=1.5, gt=0, description="new model's median latency over the old one's")
    fidelity_tolerance: float = Field(
        default=0.05, gt=0, le=1, description="largest output error against the release's fp32 variant, as a fraction"
    )


class ProbationSettings(StrictModel):
    seconds: float = Field(default=60.0, gt=0, description="how long the switched pipelines are watched")
    max_errors: int = Field(default=0, ge=0, description="errors allowed during probation")
    min_pace: float = Field(default=0.9, gt=0, le=1, description="results per item the source produced")
    stall_seconds: float = Field(default=10.0, gt=0, description="longest time without a result while items arrive")


class RolloutSettings(StrictModel):
    max_bytes: int = Field(default=2 << 30, gt=0, description="largest package archive accepted")
    max_files: int = Field(default=1000, gt=0, description="most files a package archive may hold")
    keep: int = Field(default=2, ge=1, le=20, description="earlier releases kept installed, for rollbacks")
    download_timeout_s: float = Field(default=30.0, gt=0, description="connect and per-read timeout")
    download_attempts: int = Field(default=5, ge=1, le=100, description="requests before a download fails")
    download_deadline_s: float = Field(
        default=600.0,
        gt=0,
        description="longest a rollout's download may take in all, retries included; raise it for large "
        "packages over slow links (a server trickling bytes would otherwise hold the box in one rollout)",
    )
    shadow: ShadowSettings = Field(
        default_factory=ShadowSettings,
        description="the trial before a switch: the new release runs beside the old one on the same items",
    )
    probation: ProbationSettings = Field(
        default_factory=ProbationSettings,
        description="the watch after a switch: too many errors, too slow a pace or a stall in this time roll "
        "back to the old release",
    )
