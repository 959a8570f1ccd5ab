"""One rollout at a time on a running box: fetch, verify, stage, shadow, switch, probation, commit or roll back.

Each step is written to the journal before it is taken (see `state`), and the package store's active
pointer changes in one atomic write (see `package.store`), so a stop at any instant ends, after the next
start, in the new release committed or the release before running: `recover` rolls back every rollout
that was cut short, before the pipelines load. A running rollout keeps the old models loaded until it
commits, so a rollback during probation is a swap back between two items, with nothing to reload.

A box takes a rollout only of a package signed by a key it trusts (`trust.keys`; see `archives`).
Progress goes to `<prefix>/<device_id>/rollout/<rollout_id>`, retained.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edge_runtime.config.rollout import RolloutSettings
from edge_runtime.config.schema import PipelineConfig
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.mqtt.topics import Topics
from edge_runtime.package.signing import SignedRelease, TrustedKey
from edge_runtime.package.store import ModelStore
from edge_runtime.package.trust import TrustPolicy
from edge_runtime.pipeline.build import decoder_for, input_spec_for
from edge_runtime.pipeline.streaming import Pipeline
from edge_runtime.placement.model import LoadedModel
from edge_runtime.placement.model_pool import ModelPool
from edge_runtime.rollout.archives import Archives, verify
from edge_runtime.rollout.probation import ProbationLimits, watch_all
from edge_runtime.rollout.rollback import rollback_target
from edge_runtime.rollout.served import check_served, served_failures, served_models
from edge_runtime.rollout.shadow import ShadowLimits, run_shadow
from edge_runtime.rollout.state import Journal, RolloutRecord, Stage
from edge_runtime.serving.service import Serving

__all__ = ["RolloutHost", "RolloutRequest", "Rollouts"]

log = logging.getLogger(__name__)

RECENT = 10  # rollouts kept in `status` and published again at start


@dataclass(frozen=True)
class RolloutRequest:
    rollout_id: str
    package: str  # the name the package must carry: pipelines running it are the ones switched
    source: str  # http(s) URL or local path of the archive
    sha256: str
    downgrade_to: int | None = None  # the one lower release the operator asks for, if any
    installed: bool = False  # the release `downgrade_to` is installed here already: nothing to download
    rollback: bool = False  # a return to a release that ran committed before (see `rollback`)
    config_package: bool = False  # that release is the config's own package: the commit removes the pointer


@dataclass(frozen=True)
class RolloutHost:
    """What a rollout needs of the daemon: its model pool, its pipelines and their configs, and MQTT."""

    pool: ModelPool
    config_file: Path
    pipelines: Callable[[], Mapping[str, Pipeline]]
    pipeline_config: Callable[[str], PipelineConfig]
    publish: Callable[[str, bytes], None]  # retained, at least once
    topics: Topics
    serving: Callable[[], Serving | None] = lambda: None  # the served models, once the daemon serves


class _RolledBack(Exception):  # noqa: N818 - the reason a rollout stops, carried to one place
    def __init__(self, reason: str, checks: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.checks = checks or {}


@dataclass
class _Switched:
    pipeline: Pipeline
    old: LoadedModel
    new: LoadedModel
    user: str


class Rollouts:
    def __init__(
        self, host: RolloutHost, settings: RolloutSettings, state_dir: Path, trust: TrustPolicy | None
    ) -> None:
        self.host = host
        self.settings = settings
        self.trust = trust
        self.journal = Journal(state_dir)
        self.archives = Archives()
        self.store: ModelStore = host.pool.store
        self._lock = threading.Lock()
        self._running: tuple[RolloutRecord, threading.Thread, threading.Event] | None = None
        self._latest: RolloutRecord | None = None  # the newest record published, for the stats report

    # -- start-up -------------------------------------------------------------------------------------

    def recover(self) -> list[RolloutRecord]:
        """Roll back every rollout a stop cut short, before any pipeline loads; returns them, rolled back.

        The latest rollouts' states are published again too: a stop may have come between a step on
        disk and its message."""
        self.store.clear_staging()
        recovered = []
        for record in self.journal.interrupted():
            self._restore_pointer(record)
            reason = f"the box stopped while the rollout was {record.stage.value}; the release before runs"
            recovered.append(self.journal.roll_back(record, reason))
            log.warning("rollout %s of %s: %s", record.rollout_id, record.package, reason)
        for record in self.journal.records()[-RECENT:]:
            self._publish(record)
        return recovered

    # -- commands -------------------------------------------------------------------------------------

    def start(self, request: RolloutRequest) -> RolloutRecord:
        """Begin `request` on a thread of its own; raises EdgeRuntimeError when another one runs or it is refused."""
        self._trusted()
        with self._lock:
            if self._running is not None and self._running[1].is_alive():
                raise EdgeRuntimeError(f"rollout {self._running[0].rollout_id} is still running; abort it first")
            # what runs now is on disk before any step: a failure at any point goes back to it
            running = self.store.active(request.package)
            record = self.journal.begin(
                RolloutRecord(
                    request.rollout_id, request.package, request.source, request.sha256.lower(),
                    previous_release=running.release if running else None, rollback=request.rollback,
                    config_package=request.config_package,
                )
            )  # fmt: skip
            stop = threading.Event()
            thread = threading.Thread(target=self._run, args=(record, request, stop), name="rollout", daemon=True)
            self._running = (record, thread, stop)
        self._publish(record)
        thread.start()
        return record

    def roll_back_to(self, rollout_id: str, package: str, release: int | None = None) -> RolloutRecord:
        """A rollout back to a release installed here: verified again, shadowed and on probation like any other.

        Without `release`, to the one that ran committed before the active one, the config's own package
        included (see `rollback`); a release that was itself rolled back is never chosen."""
        to_config = False
        if release is None:
            release, to_config = rollback_target(self.journal, self.store, self.host, self._trusted(), package)
        path = self.store.path(package, release)
        if not path.is_dir():
            raise EdgeRuntimeError(f"release {release} of {package} is not installed here")
        return self.start(
            RolloutRequest(
                rollout_id, package, str(path), "0" * 64, release, installed=True, rollback=True,
                config_package=to_config,
            )
        )  # fmt: skip

    def abort(self, rollout_id: str) -> None:
        with self._lock:
            running = self._running
        if running is None or running[0].rollout_id != rollout_id or not running[1].is_alive():
            raise EdgeRuntimeError(f"rollout {rollout_id} is not running")
        running[2].set()

    def wait(self, timeout: float | None = None) -> RolloutRecord | None:
        """The running rollout's final record once it ends (None if none ran or it did not end in time)."""
        with self._lock:
            running = self._running
        if running is None:
            return None
        running[1].join(timeout)
        return None if running[1].is_alive() else self.journal.get(running[0].rollout_id)

    def close(self, timeout: float = 10.0) -> None:
        """Stop a running rollout: it rolls back (a stop during probation is no proof of health)."""
        with self._lock:
            running = self._running
        if running is not None and running[1].is_alive():
            running[2].set()
            running[1].join(timeout)

    @property
    def busy(self) -> bool:
        """A rollout is running: it holds the models it shadows and switches, so nothing else may swap them."""
        with self._lock:
            running = self._running
        return running is not None and running[1].is_alive()

    def status(self) -> list[dict[str, Any]]:
        return [record.to_dict() for record in self.journal.records()[-RECENT:]]

    def latest(self) -> dict[str, Any] | None:
        """The most recent rollout in brief, for the stats report (see `RolloutRecord.brief`).

        Kept in memory as it is published (`recover` publishes the recent ones, newest last), so the report
        reads no file each interval."""
        return None if self._latest is None else self._latest.brief()

    def figures(self) -> dict[str, int]:
        """Counters for the stats report and Prometheus, since the daemon started."""
        return {"archives_refused": self.archives.refused}

    # -- the rollout, on its thread ---------------------------------------------------------------------

    def _run(self, record: RolloutRecord, request: RolloutRequest, stop: threading.Event) -> None:
        loaded: list[_Switched] = []  # new models acquired for the pipelines of the package
        switched: list[_Switched] = []  # those a pipeline now runs
        served: list[str] = []  # served models of the package, switched at once with the pointer
        try:
            record = self._fetch_and_stage(record, request, stop)
            record = self._shadow(record, loaded, stop)
            record = self._switch(record, loaded, switched, served)
            record = self._probation(record, switched, served, stop)
            self._commit(record, switched)
        except _RolledBack as stopped:
            self._roll_back(record.rollout_id, loaded, switched, served, stopped.reason, stopped.checks)
        except Exception as error:  # a fault of the rollout itself must still end in a known state
            log.exception("rollout %s failed", record.rollout_id)
            self._roll_back(record.rollout_id, loaded, switched, served, f"the rollout failed: {error}", {})

    def _fetch_and_stage(self, record: RolloutRecord, request: RolloutRequest, stop: threading.Event) -> RolloutRecord:
        if request.installed and request.downgrade_to is not None:
            return self._stage_installed(record, request)
        staging = self.store.staging(record.rollout_id)
        try:
            unpacked = self.archives.fetch_and_unpack(request.source, record.sha256, staging, self.settings, stop)
            signed = verify(unpacked, self.trust, request.package, request.downgrade_to)
        except EdgeRuntimeError as error:
            raise _RolledBack(str(error)) from None
        record = self._verified(record, signed, f"release {signed.release}")
        installed = self.store.install(record.package, signed.release, unpacked)
        shutil.rmtree(staging, ignore_errors=True)
        return self._advance(record, Stage.STAGED, str(installed.path))

    def _stage_installed(self, record: RolloutRecord, request: RolloutRequest) -> RolloutRecord:
        assert request.downgrade_to is not None
        try:
            signed = verify(
                self.store.path(record.package, request.downgrade_to), self.trust, record.package, request.downgrade_to
            )
        except EdgeRuntimeError as error:
            raise _RolledBack(str(error)) from None
        record = self._verified(record, signed, f"installed release {signed.release}")
        return self._advance(record, Stage.STAGED, "installed already")

    def _verified(self, record: RolloutRecord, signed: SignedRelease, what: str) -> RolloutRecord:
        """The record at `verified`, naming the release (the one it replaces was recorded at the start)."""
        return self._advance(
            record, Stage.VERIFIED, f"{what}, signed by key {signed.key_id}",
            release=signed.release, version=signed.version,
        )  # fmt: skip

    def _shadow(self, record: RolloutRecord, loaded: list[_Switched], stop: threading.Event) -> RolloutRecord:
        targets = {name: p for name, p in self.host.pipelines().items() if p.model.package.name == record.package}
        answering = served_models(self.host.serving(), record.package)
        if not targets and not answering:
            raise _RolledBack(f"nothing on this box runs package {record.package}")
        record = self._advance(record, Stage.SHADOW, ", ".join([*targets, *(f"serve:{n}" for n in answering)]))
        assert record.release is not None
        path = self.store.path(record.package, record.release)
        limits = ShadowLimits(**self.settings.shadow.model_dump())
        summaries: dict[str, Any] = {}
        for name, pipeline in targets.items():
            config = self.host.pipeline_config(name)
            user = f"rollout:{record.rollout_id}:{name}"
            try:
                new = self.host.pool.acquire(
                    user, config.model.model_copy(update={"path": path}), self.host.config_file,
                    unpaced=config.source.unpaced, record_release=False, downgrade_to=record.release,
                )  # fmt: skip
            except EdgeRuntimeError as error:
                raise _RolledBack(f"the new release does not load for pipeline {name}: {error}", summaries) from None
            loaded.append(_Switched(pipeline, pipeline.model, new, user))
            summary = run_shadow(pipeline, new, decoder_for(config, new), input_spec_for(config, new), limits, stop)
            summaries[name] = summary.to_dict()
            if stop.is_set():
                raise _RolledBack("aborted during the shadow run", {"shadow": summaries})
            if not summary.passed:
                raise _RolledBack(f"shadow of pipeline {name}: {summary.reason}", {"shadow": summaries})
        serving = self.host.serving()
        for name in answering:
            assert serving is not None
            tolerance = self.settings.shadow.fidelity_tolerance
            result, failure = check_served(serving, self.host.pool, name, path, record.release, tolerance,
                                           record.rollout_id)  # fmt: skip
            summaries[f"serve:{name}"] = result
            if failure is not None:
                raise _RolledBack(failure, {"shadow": summaries})
        return replace(record, checks={"shadow": summaries})

    def _switch(
        self, record: RolloutRecord, loaded: list[_Switched], switched: list[_Switched], served: list[str]
    ) -> RolloutRecord:
        """The active pointer first, then the served models and each pipeline between two of its items."""
        record = self._advance(record, Stage.ACTIVE, "switching", checks=record.checks)
        self.store.activate(record.package, record.runs)
        serving = self.host.serving()
        if serving is not None:
            served.extend(serving.take_release(record.package, record_release=False, downgrade_to=record.release))
        for entry in loaded:
            config = self.host.pipeline_config(entry.pipeline.name)
            try:
                entry.pipeline.swap_model(entry.new, decoder_for(config, entry.new), input_spec_for(config, entry.new))
            except Exception as error:
                raise _RolledBack(f"pipeline {entry.pipeline.name} could not switch: {error}", record.checks) from None
            switched.append(entry)
        return record

    def _probation(
        self, record: RolloutRecord, switched: list[_Switched], served: list[str], stop: threading.Event
    ) -> RolloutRecord:
        record = self._advance(record, Stage.PROBATION, f"{self.settings.probation.seconds:.0f} s")
        limits = ProbationLimits(**self.settings.probation.model_dump())
        pipelines = [entry.pipeline for entry in switched]
        verdicts, failed_requests = watch_all(
            pipelines, lambda: served_failures(self.host.serving(), served), bool(served), limits, stop
        )
        checks = {**record.checks, "probation": {name: v.to_dict() for name, v in verdicts.items()}}
        failures = [f"pipeline {name}: {v.reason}" for name, v in verdicts.items() if not v.passed]
        if failed_requests > limits.max_errors:
            checks["probation"]["served"] = {"failed_requests": failed_requests}
            failures.insert(0, f"served models {', '.join(served)}: {failed_requests} requests failed")
        first = next((f for f in failures if "probation was stopped" not in f), None)
        if first is not None:
            raise _RolledBack(f"probation failed: {first}", checks)
        if failures or stop.is_set():
            raise _RolledBack("aborted during probation", checks)
        return replace(record, checks=checks)

    def _commit(self, record: RolloutRecord, switched: list[_Switched]) -> None:
        record = self._advance(record, Stage.COMMITTED, "", checks=record.checks)
        for entry in switched:
            self.host.pool.release(entry.pipeline.name)
            self.host.pool.rename(entry.user, entry.pipeline.name)
        if self.trust is not None and record.release is not None:
            floor = self.trust.releases.installed(record.package)
            if floor is not None and record.release < floor:  # a downgrade the operator signed for
                self.trust.releases.lower_to(record.package, record.release)
            else:
                self.trust.releases.record(record.package, record.release)
        before = self.journal.history(record.package)[-2:-1]  # what a rollback from here goes to stays installed
        removed = self.store.prune(record.package, keep_also={r for r in before if r is not None})
        log.info(
            "rollout %s: %s release %s committed%s", record.rollout_id, record.package, record.release,
            f"; removed releases {removed}" if removed else "",
        )  # fmt: skip

    def _roll_back(
        self,
        rollout_id: str,
        loaded: list[_Switched],
        switched: list[_Switched],
        served: list[str],
        reason: str,
        checks: dict[str, Any],
    ) -> None:
        """Back to the models and the release before, whatever step stopped; the journal says so last."""
        for entry in reversed(switched):
            try:
                config = self.host.pipeline_config(entry.pipeline.name)
                entry.pipeline.swap_model(entry.old, decoder_for(config, entry.old), input_spec_for(config, entry.old))
            except Exception:
                log.exception("rollout %s: pipeline %s could not switch back", rollout_id, entry.pipeline.name)
        for entry in loaded:
            self.host.pool.release(entry.user)
        record = self.journal.get(rollout_id)
        if record is None or record.final:
            return
        self._restore_pointer(record)
        serving = self.host.serving()
        if served and serving is not None:
            # the release before, active again; the release floor was not raised, so it loads as it did
            serving.take_release(record.package, record_release=False, downgrade_to=record.previous_release)
        shutil.rmtree(self.store.root / ".staging" / rollout_id, ignore_errors=True)
        self._publish(self.journal.roll_back(record, reason, checks))
        log.warning("rollout %s of %s rolled back: %s", rollout_id, record.package, reason)

    # -- helpers ----------------------------------------------------------------------------------------

    def _trusted(self) -> list[TrustedKey]:
        if self.trust is None or not self.trust.keys:
            raise EdgeRuntimeError("this box trusts no signing key (trust.keys), so it takes no rollout")
        return list(self.trust.keys)

    def _restore_pointer(self, record: RolloutRecord) -> None:
        """The active pointer back to the release before, if this rollout moved it (only the switch does:
        older versions wrote `None` there until verification, whatever ran)."""
        if record.stage in (Stage.ACTIVE, Stage.PROBATION):
            self.store.activate(record.package, record.previous_release)

    def _advance(self, record: RolloutRecord, stage: Stage, note: str, **changes: Any) -> RolloutRecord:
        record = self.journal.advance(record, stage, note, **changes)
        log.info("rollout %s of %s: %s %s", record.rollout_id, record.package, stage.value, note)
        return self._publish(record)

    def _publish(self, record: RolloutRecord) -> RolloutRecord:
        self._latest = record
        self.host.publish(self.host.topics.rollout(record.rollout_id), json.dumps(record.to_dict()).encode())
        return record
