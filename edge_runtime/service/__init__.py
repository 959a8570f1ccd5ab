"""Running under systemd: readiness and status notifications, and a watchdog that pings only on progress."""

from edge_runtime.service.notify import SystemdNotifier, watchdog_interval
from edge_runtime.service.watchdog import PipelineHealth, ProgressWatchdog

__all__ = ["PipelineHealth", "ProgressWatchdog", "SystemdNotifier", "watchdog_interval"]
