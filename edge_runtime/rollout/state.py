"""A rollout's progress, written to disk before each step is taken, so a restart knows where it stopped.

    downloading → verified → staged → shadow → active → probation → committed
                                                   (any step before committed) → rolled_back

Each record is one JSON file under `<state_dir>/rollouts/`, replaced durably (see `durable`) at every
transition, with the time and reason of each. A box can be killed or lose power at any instant, so
what matters is which state is on disk: `committed` and `rolled_back` are final; any other state found
at start-up means the rollout was cut short, and `Journal.interrupted` hands those records to the
caller to roll back (the old version is the one that is known to work). A transition the order does not
allow raises, so a bug cannot skip the health gate.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

from edge_runtime.durable import replace_file
from edge_runtime.errors import EdgeRuntimeError

__all__ = ["FINAL", "Journal", "RolloutRecord", "Stage", "TransitionError"]

log = logging.getLogger(__name__)

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class Stage(str, Enum):
    DOWNLOADING = "downloading"
    VERIFIED = "verified"
    STAGED = "staged"
    SHADOW = "shadow"
    ACTIVE = "active"
    PROBATION = "probation"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"


ORDER = (
    Stage.DOWNLOADING,
    Stage.VERIFIED,
    Stage.STAGED,
    Stage.SHADOW,
    Stage.ACTIVE,
    Stage.PROBATION,
    Stage.COMMITTED,
)
FINAL = frozenset({Stage.COMMITTED, Stage.ROLLED_BACK})


class TransitionError(EdgeRuntimeError):
    def __init__(self, rollout_id: str, current: Stage, wanted: Stage) -> None:
        super().__init__(f"rollout {rollout_id}: cannot go from {current.value} to {wanted.value}")
        self.rollout_id = rollout_id
        self.current = current
        self.wanted = wanted


@dataclass(frozen=True)
class Step:
    stage: Stage
    at: str  # ISO 8601, UTC
    note: str = ""


@dataclass(frozen=True)
class RolloutRecord:
    """One rollout of one package to this box: where it comes from, what it replaces, and how far it got."""

    rollout_id: str
    package: str  # the package name pipelines and served models match on
    source: str  # URL or path of the archive
    sha256: str
    release: int | None = None  # known once the signature is verified
    version: str | None = None
    previous_release: int | None = None  # what ran when it began (None: the package the config names)
    rollback: bool = False  # a return to a release committed before: it ends the history after that release
    config_package: bool = False  # the release is the config's own package: the active pointer goes
    stage: Stage = Stage.DOWNLOADING
    reason: str = ""  # why it was rolled back
    steps: tuple[Step, ...] = field(default_factory=tuple)
    checks: dict[str, Any] = field(default_factory=dict)  # what the shadow and probation measured

    @property
    def final(self) -> bool:
        return self.stage in FINAL

    @property
    def runs(self) -> int | None:
        """What runs once it commits, as `previous_release` names it (None: the config's own package)."""
        return None if self.config_package else self.release

    def brief(self) -> dict[str, Any]:
        """The rollout in a few fields, for the stats report: id, package, release, stage, reason."""
        return {
            "rollout_id": self.rollout_id,
            "package": self.package,
            "release": self.release,
            "version": self.version,
            "stage": self.stage.value,
            "reason": self.reason,
        }

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stage"] = self.stage.value
        data["steps"] = [{"stage": s.stage.value, "at": s.at, "note": s.note} for s in self.steps]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutRecord:
        steps = tuple(Step(Stage(s["stage"]), str(s["at"]), str(s.get("note", ""))) for s in data.get("steps", ()))
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k not in ("stage", "steps")}
        return cls(**fields, stage=Stage(data["stage"]), steps=steps)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Journal:
    """The rollout records of this box, one file each; every change is on disk before the call returns."""

    def __init__(self, state_dir: Path) -> None:
        self.directory = state_dir / "rollouts"

    def begin(self, record: RolloutRecord) -> RolloutRecord:
        if not _ID.match(record.rollout_id):
            raise EdgeRuntimeError(f"rollout id {record.rollout_id[:80]!r}: use 1 to 64 letters, digits, '.', '_', '-'")
        if self.path(record.rollout_id).exists():
            raise EdgeRuntimeError(f"rollout {record.rollout_id} exists already; each rollout needs a new id")
        started = replace(record, stage=Stage.DOWNLOADING, steps=(Step(Stage.DOWNLOADING, _now()),))
        self._write(started)
        return started

    def advance(self, record: RolloutRecord, stage: Stage, note: str = "", **changes: Any) -> RolloutRecord:
        """The record moved on to `stage` (the next in order), with any fields `changes` names; on disk on return."""
        allowed = ORDER.index(record.stage) + 1 if record.stage in ORDER else None
        if record.final or allowed is None or allowed >= len(ORDER) or ORDER[allowed] is not stage:
            raise TransitionError(record.rollout_id, record.stage, stage)
        moved = replace(record, **changes, stage=stage, steps=(*record.steps, Step(stage, _now(), note)))
        self._write(moved)
        return moved

    def roll_back(self, record: RolloutRecord, reason: str, checks: dict[str, Any] | None = None) -> RolloutRecord:
        if record.final:
            raise TransitionError(record.rollout_id, record.stage, Stage.ROLLED_BACK)
        steps = (*record.steps, Step(Stage.ROLLED_BACK, _now(), reason))
        measured = {**record.checks, **(checks or {})}
        ended = replace(record, stage=Stage.ROLLED_BACK, reason=reason, steps=steps, checks=measured)
        self._write(ended)
        return ended

    def records(self) -> list[RolloutRecord]:
        """Every readable record, oldest first; an unreadable one is logged and left for a person to look at."""
        found = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                found.append(RolloutRecord.from_dict(json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, KeyError, TypeError) as error:
                log.error("rollout record %s is unreadable (%s); it is left as it is", path, error)
        return sorted(found, key=lambda r: r.steps[0].at if r.steps else "")

    def history(self, package: str) -> list[int | None]:
        """What ran of `package` and was committed, oldest first, ending with what runs now (None: the
        config's own package); empty before the first commit. A rollback walks back through it.

        A rollout that commits adds its release; a rollback that commits returns to an entry, and what
        came after it is dropped, so a second rollback goes further back rather than forth again. A
        release that was rolled back never ran committed, so it never appears."""
        ran: list[int | None] = []
        for record in self.records():
            if record.package != package or record.stage is not Stage.COMMITTED:
                continue
            if not ran:
                ran.append(record.previous_release)
            earlier = ran[:-1]
            if record.rollback and record.runs in earlier:
                del ran[len(earlier) - earlier[::-1].index(record.runs) :]
            else:
                ran.append(record.runs)
        return ran

    def get(self, rollout_id: str) -> RolloutRecord | None:
        return next((r for r in self.records() if r.rollout_id == rollout_id), None)

    def interrupted(self) -> list[RolloutRecord]:
        """Records a stop cut short: neither committed nor rolled back."""
        return [r for r in self.records() if not r.final]

    def path(self, rollout_id: str) -> Path:
        return self.directory / f"{rollout_id}.json"

    def _write(self, record: RolloutRecord) -> None:
        replace_file(self.path(record.rollout_id), json.dumps(record.to_dict(), indent=2) + "\n")
