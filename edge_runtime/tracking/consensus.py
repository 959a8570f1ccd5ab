"""Which sub-label a tracked object gets: Frigate's consensus over attempts, not one frame's answer.

One crop's classification is noisy: a face turned aside, a plate half in shadow. Frigate assigns a
sub-label only when an object has had at least a minimum number of attempts (3), a share of them (60 %)
agree on one label, and the agreeing attempts score at least a threshold; until then the object keeps
no sub-label rather than a wrong one. The same rule decides a change: a later majority for another label
replaces the first. Only the latest `window` attempts count, so memory per object is bounded and an
object that comes closer and is recognised better is judged on its recent, better crops.
"""

from __future__ import annotations

from collections import deque

from pydantic import Field, model_validator

from edge_runtime.config.base import StrictModel
from edge_runtime.decoders.decoded import SubLabel

__all__ = ["Consensus", "ConsensusSettings", "SubLabel"]


class ConsensusSettings(StrictModel):
    """When a tracked object's attempts agree enough to give it a sub-label."""

    min_attempts: int = Field(default=3, ge=1, description="attempts needed before any sub-label (Frigate: 3)")
    min_agreement: float = Field(
        default=0.6, gt=0, le=1, description="share of the counted attempts that must name the label (Frigate: 0.6)"
    )
    min_score: float = Field(
        default=0.8, ge=0, le=1, description="mean score the agreeing attempts must reach (Frigate's threshold)"
    )
    window: int = Field(default=10, ge=1, description="only the latest this many attempts count")

    @model_validator(mode="after")
    def _window_holds_the_attempts(self) -> ConsensusSettings:
        if self.window < self.min_attempts:
            raise ValueError(f"window ({self.window}) must be at least min_attempts ({self.min_attempts})")
        return self


class Consensus:
    """Each tracked object's attempts and its sub-label. Not thread-safe: the pipeline's post thread calls it."""

    def __init__(self, settings: ConsensusSettings) -> None:
        self.settings = settings
        self._attempts: dict[str, deque[tuple[str, float]]] = {}
        self._assigned: dict[str, SubLabel] = {}

    def add(self, object_id: str, label: str, score: float) -> SubLabel | None:
        """Count one attempt; the object's sub-label if this attempt newly assigned or changed it, else None."""
        attempts = self._attempts.get(object_id)
        if attempts is None:
            attempts = self._attempts[object_id] = deque(maxlen=self.settings.window)
        attempts.append((label, score))
        decided = self._decide(attempts)
        if decided is None:
            return None
        before = self._assigned.get(object_id)
        self._assigned[object_id] = decided
        return decided if before is None or before.label != decided.label else None

    def sub_label(self, object_id: str) -> SubLabel | None:
        """The object's sub-label now (its score: the mean of the attempts that agreed); None while there is none."""
        return self._assigned.get(object_id)

    def forget(self, object_id: str) -> None:
        self._attempts.pop(object_id, None)
        self._assigned.pop(object_id, None)

    def __len__(self) -> int:
        return len(self._attempts)

    def _decide(self, attempts: deque[tuple[str, float]]) -> SubLabel | None:
        settings = self.settings
        if len(attempts) < settings.min_attempts:
            return None
        votes: dict[str, list[float]] = {}
        for label, score in attempts:
            votes.setdefault(label, []).append(score)
        label, scores = max(votes.items(), key=lambda item: (len(item[1]), sum(item[1])))
        if len(scores) < settings.min_agreement * len(attempts) - 1e-9:  # 3 of 5 is 0.6, whatever 0.6 * 5 rounds to
            return None
        mean = sum(scores) / len(scores)
        return SubLabel(label, mean) if mean >= settings.min_score else None
