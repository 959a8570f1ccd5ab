"""The rollout journal: the order of steps is enforced, and what is on disk is what a restart finds."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.rollout.state import Journal, RolloutRecord, Stage, TransitionError

ORDERED = [Stage.VERIFIED, Stage.STAGED, Stage.SHADOW, Stage.ACTIVE, Stage.PROBATION, Stage.COMMITTED]


def record(rollout_id: str = "r-1") -> RolloutRecord:
    return RolloutRecord(rollout_id, "faces", "https://example.invalid/faces.tar", "0" * 64)


def test_a_rollout_walks_the_states_in_order_and_each_step_is_on_disk(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    current = journal.begin(record())
    for stage in ORDERED:
        changes = {"release": 7, "version": "2.0"} if stage is Stage.VERIFIED else {}
        current = journal.advance(current, stage, note=f"reached {stage.value}", **changes)
        on_disk = json.loads(journal.path("r-1").read_text())
        assert on_disk["stage"] == stage.value and Journal(tmp_path).get("r-1") == current
    assert current.final and current.release == 7 and current.version == "2.0"
    assert [step.stage for step in current.steps] == [Stage.DOWNLOADING, *ORDERED]
    assert Journal(tmp_path).interrupted() == []


@pytest.mark.parametrize("skipped_to", [Stage.STAGED, Stage.ACTIVE, Stage.COMMITTED, Stage.DOWNLOADING])
def test_a_step_cannot_be_skipped_or_repeated(tmp_path: Path, skipped_to: Stage) -> None:
    journal = Journal(tmp_path)
    current = journal.begin(record())
    with pytest.raises(TransitionError, match=f"cannot go from downloading to {skipped_to.value}"):
        journal.advance(current, skipped_to)
    assert Journal(tmp_path).get("r-1") == current  # nothing written


def test_a_final_record_stays_final(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    rolled_back = journal.roll_back(journal.begin(record()), "the canary failed")
    assert rolled_back.stage is Stage.ROLLED_BACK and rolled_back.reason == "the canary failed"
    with pytest.raises(TransitionError):
        journal.roll_back(rolled_back, "again")
    with pytest.raises(TransitionError):
        journal.advance(rolled_back, Stage.VERIFIED)


def test_records_cut_short_are_found_at_the_next_start(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    shadow = journal.begin(record("a"))
    for stage in ORDERED[:3]:
        shadow = journal.advance(shadow, stage)
    done = journal.begin(record("b"))
    for stage in ORDERED:
        done = journal.advance(done, stage)
    (journal.directory / "garbage.json").write_text("{")  # unreadable: logged and left alone
    assert [r.rollout_id for r in Journal(tmp_path).interrupted()] == ["a"]
    assert Journal(tmp_path).interrupted()[0].stage is Stage.SHADOW


@pytest.mark.parametrize("bad_id", ["", "../escape", "a/b", ".hidden", "x" * 65])
def test_rollout_ids_are_plain_names(tmp_path: Path, bad_id: str) -> None:
    with pytest.raises(EdgeRuntimeError, match="rollout id"):
        Journal(tmp_path).begin(record(bad_id))
    assert not (tmp_path / "rollouts").exists() or not any((tmp_path / "rollouts").iterdir())


def test_an_id_is_used_once(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.begin(record())
    with pytest.raises(EdgeRuntimeError, match="exists already"):
        journal.begin(record())


def test_the_history_holds_what_ran_committed_and_a_rollback_walks_back_through_it(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    assert journal.history("faces") == []

    def ended(rollout_id: str, release: int, previous: int | None, *, committed: bool = True, **flags: bool) -> None:
        current = journal.begin(replace(record(rollout_id), previous_release=previous, **flags))
        if not committed:
            journal.roll_back(current, "the shadow failed")
            return
        for stage in ORDERED:
            current = journal.advance(current, stage, **({"release": release} if stage is Stage.VERIFIED else {}))

    ended("r-2", 2, None)
    ended("r-3", 3, 2, committed=False)  # rejected: it never ran committed
    ended("r-4", 4, 2)
    assert journal.history("faces") == [None, 2, 4]
    ended("back-1", 2, 4, rollback=True)
    assert journal.history("faces") == [None, 2]  # a second rollback goes further back, not to 4 again
    ended("back-2", 1, 2, rollback=True, config_package=True)
    assert journal.history("faces") == [None]
    ended("r-5", 5, None)
    assert journal.history("faces") == [None, 5] and journal.history("other") == []
