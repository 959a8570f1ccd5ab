"""Frigate's sub-label consensus: a label only after enough attempts, a share of them agreeing, a minimum
score; a later majority replaces it; the window bounds what counts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from edge_runtime.decoders.decoded import SubLabel
from edge_runtime.tracking.consensus import Consensus, ConsensusSettings


def consensus(**settings: float) -> Consensus:
    return Consensus(ConsensusSettings.model_validate(settings))


def test_no_sub_label_before_the_minimum_number_of_attempts_even_when_all_agree() -> None:
    rule = consensus(min_attempts=3, min_agreement=0.6, min_score=0.8)
    assert rule.add("a", "alice", 0.99) is None
    assert rule.add("a", "alice", 0.99) is None
    assert rule.sub_label("a") is None
    assert rule.add("a", "alice", 0.99) == SubLabel("alice", pytest.approx(0.99))
    assert rule.sub_label("a") == SubLabel("alice", pytest.approx(0.99))


def test_the_agreeing_share_must_reach_the_minimum() -> None:
    rule = consensus(min_attempts=3, min_agreement=0.6, min_score=0.5)
    for label in ("alice", "bob", "carol", "alice"):
        assert rule.add("a", label, 0.9) is None  # alice: 2 of 4, 50 %
    assert rule.add("a", "alice", 0.9) == SubLabel("alice", pytest.approx(0.9))  # 3 of 5: exactly 60 %


def test_the_agreeing_attempts_mean_score_must_reach_the_minimum() -> None:
    rule = consensus(min_attempts=3, min_agreement=0.6, min_score=0.8)
    for score in (0.9, 0.7, 0.75):  # mean 0.783
        assert rule.add("a", "alice", score) is None
    assert rule.add("a", "alice", 0.95) == SubLabel("alice", pytest.approx(0.825))
    # the scores of disagreeing attempts do not count towards the agreeing label's mean
    other = consensus(min_attempts=3, min_agreement=0.6, min_score=0.8)
    other.add("b", "bob", 0.1)
    other.add("b", "alice", 0.9)
    other.add("b", "alice", 0.9)
    assert other.sub_label("b") == SubLabel("alice", pytest.approx(0.9))


def test_a_new_sub_label_is_returned_once_and_a_later_majority_replaces_it() -> None:
    rule = consensus(min_attempts=3, min_agreement=0.6, min_score=0.5, window=5)
    assert [rule.add("a", "alice", 0.9) for _ in range(3)][-1] == SubLabel("alice", pytest.approx(0.9))
    assert rule.add("a", "alice", 0.9) is None  # the same label again is no news
    changes = [rule.add("a", "bob", 0.9) for _ in range(5)]
    assert [c for c in changes if c is not None] == [SubLabel("bob", pytest.approx(0.9))]
    assert rule.sub_label("a") == SubLabel("bob", pytest.approx(0.9))


def test_only_the_window_counts_and_forgetting_clears_an_object() -> None:
    rule = consensus(min_attempts=2, min_agreement=1.0, min_score=0.0, window=2)
    rule.add("a", "alice", 0.9)
    rule.add("a", "bob", 0.9)
    assert rule.sub_label("a") is None
    assert rule.add("a", "bob", 0.9) == SubLabel("bob", pytest.approx(0.9))  # alice fell out of the window
    rule.forget("a")
    assert rule.sub_label("a") is None and len(rule) == 0


def test_objects_do_not_share_attempts() -> None:
    rule = consensus(min_attempts=2, min_agreement=0.6, min_score=0.0)
    rule.add("a", "alice", 0.9)
    assert rule.add("b", "alice", 0.9) is None


def test_a_window_smaller_than_the_attempts_needed_is_refused() -> None:
    with pytest.raises(ValidationError, match="window"):
        ConsensusSettings(min_attempts=5, window=3)
