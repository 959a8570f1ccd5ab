"""Which figure the ship/do-not-ship flag looks at: task accuracy lost where there is ground truth."""

from __future__ import annotations

import pytest

from converters.detection_metrics import DetectionAccuracy
from converters.metrics import Accuracy, Agreement, OutputAgreement, drop_of

AGREEMENT = Agreement((OutputAgreement("scores", 0.5, 0.01, 0.998, 0.002),), 0.97)


def test_map_lost_is_preferred_to_every_other_figure() -> None:
    drop = drop_of(
        Accuracy(0.9, None), Accuracy(0.8, None), AGREEMENT, DetectionAccuracy(0.82), DetectionAccuracy(0.79)
    )
    assert drop.points == pytest.approx(3.0)
    assert drop.metric == "mAP@0.5 lost, in points"


def test_a_variant_that_gained_map_has_a_negative_drop() -> None:
    assert drop_of(None, None, AGREEMENT, DetectionAccuracy(0.7), DetectionAccuracy(0.725)).points == pytest.approx(
        -2.5
    )


def test_without_a_variants_map_the_drop_falls_back_to_agreement() -> None:
    drop = drop_of(None, None, AGREEMENT, DetectionAccuracy(0.7), None)
    assert drop.metric == "samples whose predicted class changed, in %"
    assert drop.points == pytest.approx(3.0)
