"""`edge-runtime run`: the service. Pipelines from sources to MQTT, supervised for systemd.

Start-up order matters for a box nobody can reach: the spool opens first (so nothing produced from
then on can be lost), the broker connection starts in the background (an unreachable broker must not
keep the service from running), models load, pipelines start, and only then READY=1 is sent. SIGHUP
reloads the config and restarts only the pipelines that changed; SIGTERM stops the sources, lets
what is in flight finish into the spool, and exits within the stop timeout.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any

from edge_runtime.config import DaemonConfig, PipelineConfig, diff_pipelines, load_config
from edge_runtime.control.channel import ControlChannel
from edge_runtime.control.disabled import DisabledPipelines
from edge_runtime.control.handlers import ControlContext
from edge_runtime.control.signed import NonceStore
from edge_runtime.errors import ConfigError, EdgeRuntimeError
from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.discovery_publisher import DiscoveryPublisher
from edge_runtime.mqtt.publisher import Publisher
from edge_runtime.mqtt.retained import RetainedStates
from edge_runtime.mqtt.spool import Spool
from edge_runtime.mqtt.topics import Topics
from edge_runtime.package.trust import TrustPolicy, trusted_keys
from edge_runtime.pipeline.build import build_pipeline
from edge_runtime.pipeline.cascade_models import acquire_cascade_models, release_cascade_models
from edge_runtime.pipeline.streaming import Pipeline
from edge_runtime.placement.fastest import FastestChoices
from edge_runtime.placement.loading import Box, look_at_box
from edge_runtime.placement.model_pool import ModelPool
from edge_runtime.placement.selection import model_key
from edge_runtime.rollout.manager import RolloutHost, Rollouts
from edge_runtime.service.broker_qos import refuse_qos_the_broker_lacks
from edge_runtime.service.health import HEALTH_FILE, HealthReporter
from edge_runtime.service.metrics import serve_metrics
from edge_runtime.service.model_switch import switch_to_stored_choice
from edge_runtime.service.notify import SystemdNotifier
from edge_runtime.service.report import log_stats, pipeline_figures, shared_source_of
from edge_runtime.service.stats import RateMeter
from edge_runtime.service.watchdog import ProgressWatchdog
from edge_runtime.serving.service import Serving
from edge_runtime.sources.base import SourceContext
from edge_runtime.sources.shared import SharedSources

log = logging.getLogger("edge_runtime")

CONNECT_WAIT_S = 5.0  # READY=1 is sent after this even without a broker: results spool meanwhile
STOP_BUDGET_S = 20.0  # within the unit's TimeoutStopSec=30
EXIT_UNDELIVERED = 3  # --exit-when-done: the sources ended, but results stay in the spool (the next start sends them)


def run_daemon(args: argparse.Namespace) -> int:
    faulthandler.enable(all_threads=True)  # a watchdog abort then leaves every thread's stack in the journal
    config = load_config(args.config)  # the checks `check-config` makes: a config it refuses never starts
    # -v or -q on the command line, for one run by hand, win over the file's level
    logging.getLogger().setLevel(config.log_level.upper() if args.log_level is None else args.log_level)
    log.info("state in %s, cache in %s", config.state_dir, config.cache_dir)
    box = look_at_box(args.root, args.profiles, isolated=True)
    exit_when_done = args.drain_timeout if args.exit_when_done else None
    return Daemon(config, args.config, box, exit_when_done=exit_when_done).run()


class Daemon:
    def __init__(self, config: DaemonConfig, config_path: Path, box: Box, exit_when_done: float | None = None) -> None:
        """`exit_when_done`: stop once every source has ended, after waiting up to that many seconds for the
        spool to reach the broker (`run` then returns EXIT_UNDELIVERED if it did not)."""
        self.disabled = DisabledPipelines(config.state_dir)
        self.config = config = self.disabled.applied(config)
        self.topics = Topics(config.mqtt.topic_prefix, config.device_id)
        self.config_path = config_path
        self.box = box
        self.exit_when_done = exit_when_done
        self.notifier = SystemdNotifier()
        self.pipelines: dict[str, Pipeline] = {}
        self.shared_sources = SharedSources(config.sources)  # cameras opened once for the pipelines naming them
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._meter = RateMeter(window_s=config.stats.interval_s)
        self._started = time.monotonic()
        self._stop_metrics: Callable[[], None] | None = None
        try:
            config.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # checked with the config; this is for a directory that changed since
            raise ConfigError(f"state_dir: cannot create {config.state_dir}: {error.strerror}") from None
        self.spool = Spool.from_settings(config.mqtt.spool, config.state_dir / "spool.sqlite")
        self.connection = MqttConnection(config.mqtt, config.device_id)
        self.connection.qos.wanted = any(p.publish.qos == 2 for p in config.enabled_pipelines)
        self.publisher = Publisher(self.connection, self.spool, config.mqtt.spool)
        self.states = RetainedStates(self.connection)
        record = config.state_dir / "homeassistant-discovery.json"  # what Home Assistant was told
        self.discovery = DiscoveryPublisher(self.connection, self.states, self.topics, record, self._switch_pipeline)
        trust = TrustPolicy.from_settings(config.trust, config.state_dir)
        self._fastest_found: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.fastest = FastestChoices(box, config.state_dir, self._fastest_found.put, lambda: self.rollouts.busy)
        self.model_pool = ModelPool(box, config.state_dir, config.cache_dir, trust, self.fastest)
        self.watchdog = ProgressWatchdog(self.notifier)
        self.health = HealthReporter(self.watchdog, self.publisher.stats, config.state_dir / HEALTH_FILE)
        self.serving: Serving | None = None
        host = RolloutHost(
            pool=self.model_pool,
            config_file=config_path,
            pipelines=lambda: dict(self.pipelines),
            pipeline_config=lambda name: self.config.pipeline(name),
            publish=self.states.put,
            topics=self.topics,
            serving=lambda: self.serving,
        )
        self.rollouts = Rollouts(host, config.rollout, config.state_dir, trust)
        self.control: ControlChannel | None = None
        if config.control.keys:
            context = ControlContext(
                config_file=config_path,
                report=self.report,
                reload=self._reload.set,
                pipelines=lambda: dict(self.pipelines),
                disabled=self.disabled.names,
                set_enabled=self.disabled.set,
                models=self.model_pool.describe,
                store=self.model_pool.store,
                rollouts=self.rollouts,
            )
            keys = trusted_keys(config.control.keys, "control.keys")
            nonces = NonceStore(config.state_dir)
            self.control = ControlChannel(self.connection, self.topics, config.control, keys, nonces, context)

    def run(self) -> int:
        self._install_signal_handlers()
        self.publisher.start()
        self.connection.start()
        self.notifier.status("loading models")
        try:
            self.rollouts.recover()  # before any model loads: a rollout a stop cut short ends rolled back
            if self.control is not None:
                self.control.start()
            for pipeline_config in self.config.enabled_pipelines:
                self._start_pipeline(pipeline_config)
            if self.config.serve is not None:
                self.serving = Serving(
                    self.config.serve,
                    self.config.device_id,
                    self.model_pool,
                    self.config_path,
                    self.connection,
                    self.topics,
                )
                self.serving.start()
            self.discovery.apply(self.config, self.disabled.names())  # after the pipelines put their counts at zero
            connected = self.connection.wait_connected(CONNECT_WAIT_S)
            if connected:
                refuse_qos_the_broker_lacks(self.connection, self.config, CONNECT_WAIT_S)
            mode = "connected to the broker" if connected else "broker unreachable, spooling results"
            served = f", serving {len(self.serving.models)} models" if self.serving else ""
            self.notifier.ready(f"{len(self.pipelines)} pipelines running{served}, {mode}")
            log.info("edge-runtime ready: %s%s, %s", ", ".join(self.pipelines) or "no pipelines", served, mode)
            self.health.start()
            self.watchdog.start()
            prometheus = self.config.stats.prometheus
            if prometheus.enabled:
                self._stop_metrics = serve_metrics(self.report, prometheus.host, prometheus.port)
                log.info("metrics at http://%s:%d/metrics", prometheus.host, prometheus.port)
            self._supervise()
            if self.exit_when_done is not None and not self._stop.is_set():
                return self._deliver_before_exit(self.exit_when_done)
        finally:
            self._shut_down()
        return 0

    def _install_signal_handlers(self) -> None:
        def stop(signum: int, _frame: FrameType | None) -> None:
            if self._stop.is_set():  # a terminal's Ctrl-C pressed again, or a supervisor repeating itself
                log.info(
                    "received %s again; still stopping (pipelines finish, the spool is kept)",
                    signal.Signals(signum).name,
                )
            else:
                log.info("received %s, stopping", signal.Signals(signum).name)
            self._stop.set()

        def reload(_signum: int, _frame: FrameType | None) -> None:
            self._reload.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGHUP, reload)

    def _supervise(self) -> None:
        next_stats = time.monotonic() + self.config.stats.interval_s
        while not self._stop.is_set():
            self._stop.wait(min(0.5, max(0.0, next_stats - time.monotonic())))
            self.states.refresh()
            if self._reload.is_set():
                self._reload.clear()
                self._apply_reload()
            self._take_fastest_choices()
            if self.discovery.announce_if_asked() or time.monotonic() >= next_stats:
                self._publish_stats()
                next_stats = time.monotonic() + self.config.stats.interval_s
            done = self.pipelines and all(p.finished.is_set() for p in self.pipelines.values())
            if self.exit_when_done is not None and done:
                log.info("every source has ended; stopping")
                break

    # -- pipelines ---------------------------------------------------------------------------------

    def _start_pipeline(self, pipeline_config: PipelineConfig) -> None:
        name = pipeline_config.name
        self.notifier.extend_timeout(120)  # a first NPU or GPU compile can take minutes
        log.info(
            "pipeline %s: loading %s (a first compile for a device can take minutes)", name, pipeline_config.model.path
        )
        loading_started = time.monotonic()
        model = self.model_pool.acquire(
            name, pipeline_config.model, self.config_path, unpaced=pipeline_config.source.unpaced
        )
        try:
            stage_models = acquire_cascade_models(self.model_pool, pipeline_config, self.config_path)
        except BaseException:
            self.model_pool.release(name)
            raise
        loaded_in = time.monotonic() - loading_started
        pipeline = build_pipeline(
            pipeline_config,
            model,
            topics=self.topics,
            sink=self.publisher,
            source_context=self._source_context(),
            retained=self.states,
            on_progress=self.watchdog.beat,
            on_waiting=self.watchdog.waiting,
            cascade_models=stage_models,
        )
        self.watchdog.register(name)
        pipeline.start()
        self.pipelines[name] = pipeline
        self.states.refresh()  # a session begun while models loaded gets the states at zero now, not at the end
        runs_on = model.backend.runs_on
        hint = f", {runs_on.details['hint']} hint" if "hint" in runs_on.details else ""
        log.info(
            "pipeline %s: %s on %s %s (%s, %s%s), variant %s, ready in %.1f s",
            name,
            pipeline.source.name,
            runs_on.backend,
            runs_on.device,
            runs_on.device_name,
            runs_on.precision,
            hint,
            model.variant_id,
            loaded_in,
        )

    def _stop_pipeline(self, name: str, timeout: float) -> None:
        pipeline = self.pipelines.pop(name)
        pipeline.stop(timeout)
        self.watchdog.unregister(name)
        self.model_pool.release(name)
        if pipeline.cascade is not None:
            release_cascade_models(self.model_pool, name, [stage.config.name for stage in pipeline.cascade.stages])

    def _take_fastest_choices(self) -> None:
        """Pipelines onto the choices `select: fastest` stored; after the running rollout, if one runs."""
        while not self.rollouts.busy and not self._fastest_found.empty():
            key = self._fastest_found.get()
            switch_to_stored_choice(key, self.pipelines, self.config.pipeline, self.model_pool, self.config_path)

    def _source_context(self) -> SourceContext:
        return SourceContext(subscribe=self.connection.subscribe, shared=self.shared_sources)

    # -- reload, stats, shutdown -------------------------------------------------------------------

    def _apply_reload(self) -> None:
        self.notifier.reloading()
        try:
            new = self.disabled.applied(load_config(self.config_path))
        except EdgeRuntimeError as error:
            log.error("reload refused, keeping the running config: %s", error)
            self.notifier.ready("reload refused: config invalid")
            return
        diff = diff_pipelines(self.config, new)
        if diff.restart_all:
            log.warning("reload: device id, broker or directories changed; restart the service to apply them")
        for section in ("serve", "trust", "control", "rollout"):
            if getattr(new, section) != getattr(self.config, section):
                log.warning("reload: the %s section changed; restart the service to apply it", section)
        for name in (*diff.removed, *diff.changed):
            self._stop_pipeline(name, timeout=5.0)
        for name in diff.removed:  # no model, count, occupancy, snapshot or mask left retained for a pipeline gone
            self.states.clear_under(self.topics.pipeline(name))
            for published in (self.topics.snapshot(name), self.topics.mask(name)):  # retained by the publisher
                self.states.put(published, b"")
        self.config = new
        self.shared_sources.update(new.sources)
        before_start = self.states.mark()
        self.discovery.apply(new, self.disabled.names())  # after the clearing and the mark: a switch's state stays
        for name in (*diff.added, *diff.changed):
            self._start_pipeline(new.pipeline(name))
        for name in diff.changed:  # what the pipeline had and no longer has: a zone or a line taken out
            self.states.clear_under(self.topics.pipeline(name), before=before_start)
        log.info("reloaded: added %s, changed %s, removed %s", diff.added, diff.changed, diff.removed)
        self.notifier.ready(f"{len(self.pipelines)} pipelines running")

    def _switch_pipeline(self, name: str, on: bool) -> None:
        """A Home Assistant switch, kept as the signed disable/enable commands keep it, applied by a reload."""
        try:
            self.disabled.set(name, on)
        except OSError as error:
            log.error("switch for pipeline %s not applied: cannot keep it in %s (%s)", name, self.disabled.path, error)
            return
        self._reload.set()

    def report(self) -> dict[str, Any]:
        searches = self.fastest.describe()
        measured_by_box = {p.name for p in self.config.pipelines if p.model.select == "fastest"}
        pipelines = {}
        readers: dict[str, str | None] = {}  # the camera in `sources:` each pipeline reads, None for its own
        for name, pipeline in list(self.pipelines.items()):  # the metrics thread reads while a reload edits
            searched = searches.get(model_key(pipeline.model.package), {}) if name in measured_by_box else None
            pipelines[name] = pipeline_figures(pipeline, self._meter, searched)
            readers[name] = shared_source_of(pipeline)
        publisher = self.publisher.stats()
        mqtt = asdict(publisher) | {"spool_depth": publisher.spool_messages}
        mqtt["dropped"] = publisher.dropped_full + publisher.dropped_age
        uptime = round(time.monotonic() - self._started, 1)
        report = {"device_id": self.config.device_id, "uptime_s": uptime, "pipelines": pipelines, "mqtt": mqtt}
        if self.config.sources:  # each camera in `sources:` that is open, for all the pipelines reading it
            report["sources"] = self.shared_sources.figures(readers, self._meter.rate)
        # the latest rollout in brief, if any ran, beside counters that exist from the start
        report["rollout"] = (self.rollouts.latest() or {}) | self.rollouts.figures()
        if self.serving is not None:
            report["serving"] = self.serving.report()
            if self.serving.mqtt is not None:  # requests that named nowhere to answer, so no model either
                mqtt["requests_dropped"] = self.serving.mqtt.dropped
            report["serving_refused"] = {"unknown_model": self.serving.unknown_models.count}  # HTTP and MQTT
        if self.control is not None:
            mqtt.update(self.control.figures())
        return report

    def _publish_stats(self) -> None:
        report = self.report()
        self.publisher.publish(self.topics.stats, json.dumps(report).encode(), qos=0)
        log_stats(report, self.pipelines, self.shared_sources.outages())

    def _deliver_before_exit(self, timeout: float) -> int:
        """The sources have ended: finish the pipelines, then wait for the spool and the latest retained states
        (the counts a stopped pipeline put back to zero) to reach the broker."""
        for name in list(self.pipelines):
            self._stop_pipeline(name, timeout=10.0)
        spooled = self.publisher.stats().spool_messages
        if spooled:
            log.info("waiting up to %.0f s for %d spooled results to reach the broker", timeout, spooled)
        deadline = time.monotonic() + timeout
        while not self._stop.is_set():
            self.states.refresh()
            drained = self.publisher.drain(min(1.0, max(0.0, deadline - time.monotonic())))
            self.states.refresh()
            if drained and self.states.in_session:
                log.info("every result reached the broker")
                return 0
            if time.monotonic() >= deadline:
                break
            if drained:  # only the states wait, for a connection: drain returned at once
                self._stop.wait(0.1)
        return EXIT_UNDELIVERED

    def _shut_down(self) -> None:
        self.notifier.stopping()
        self.watchdog.stop()
        self.health.stop()
        if self._stop_metrics is not None:
            self._stop_metrics()
        deadline = time.monotonic() + STOP_BUDGET_S
        self.fastest.close()  # a measurement cut short stores nothing; the next start measures again
        self.rollouts.close()  # a rollout stopped before it commits rolls back
        if self.control is not None:
            self.control.stop()
        if self.serving is not None:
            self.serving.stop()
        for name in list(self.pipelines):
            self._stop_pipeline(name, timeout=max(1.0, (deadline - time.monotonic()) / 2))
        self.shared_sources.close()
        self.publisher.close(timeout=max(0.5, deadline - time.monotonic()))
        left = self.publisher.stats().spool_messages
        if left:
            log.warning(
                "%d results stay in the spool %s: the broker has not acknowledged them; the next start sends them",
                left,
                self.spool.path,
            )
        self.connection.stop()
        self.spool.close()
        self.model_pool.close()
        log.info("edge-runtime stopped")
