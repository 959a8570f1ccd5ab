"""When a cascade stage runs its model again on a tracked object: DeepStream's re-inference rules, in seconds.

A second model on a tracked object's crop gives the same answer frame after frame while the object looks
the same, so running it on every frame spends the box on answers already known. DeepStream's secondary
inference caches each object's answer and infers again only when the object's box has grown by
`REINFER_AREA_THRESHOLD` (0.2: a fifth more pixels, so a face walking towards the camera is looked at again
with more detail) or when `secondary-reinfer-interval` frames have passed. Here the interval is in seconds
of capture time, since pipelines run at their own frame rates and a frame count means a different wait on
each. An object never attempted is due at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from edge_runtime.config.base import StrictModel

__all__ = ["ReinferRule", "ReinferSettings"]


class ReinferSettings(StrictModel):
    """When a tracked object's crop goes through the stage's model again."""

    area_growth: float = Field(
        default=0.2,
        gt=0,
        description="again once the box's area has grown by this fraction since the last attempt "
        "(DeepStream's REINFER_AREA_THRESHOLD: 0.2)",
    )
    interval_s: float = Field(
        default=1.0, gt=0, description="again once this many seconds of capture time have passed since the last"
    )


@dataclass(slots=True)
class _Attempt:
    area: float
    at: float


class ReinferRule:
    """Which tracked objects are due for another attempt. Not thread-safe: the pipeline's post thread calls it."""

    def __init__(self, settings: ReinferSettings) -> None:
        self.settings = settings
        self._last: dict[str, _Attempt] = {}

    def due(self, object_id: str, area: float, now: float) -> bool:
        """Whether the object, whose box has `area` square pixels at capture time `now`, is due."""
        last = self._last.get(object_id)
        if last is None:
            return True
        grown = area >= last.area * (1.0 + self.settings.area_growth)
        return grown or now - last.at >= self.settings.interval_s

    def attempted(self, object_id: str, area: float, now: float) -> None:
        """The object's crop went through the model now, at this area."""
        self._last[object_id] = _Attempt(area, now)

    def forget(self, object_id: str) -> None:
        """The object ended: its state goes."""
        self._last.pop(object_id, None)

    def __len__(self) -> int:
        return len(self._last)
