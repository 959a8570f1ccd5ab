"""Decoded results under a score threshold, and a detection's tracking keys in its message."""

from __future__ import annotations

import pytest

from edge_runtime.decoders.decoded import (
    Anomaly,
    Classifications,
    ClassScore,
    Detection,
    Detections,
    Keypoint,
    Keypoints,
    Landmark,
    Regression,
    Segmentation,
)


def detections(*scores: float) -> Detections:
    return Detections(
        tuple(Detection("person", score, (10.0 * i, 0.0, 10.0 * i + 5, 5.0)) for i, score in enumerate(scores))
    )


def test_detections_below_the_threshold_are_left_out_and_those_at_it_kept() -> None:
    found = detections(0.9, 0.7, 0.7, 0.4, 0.1)
    kept = found.scoring_at_least(0.7)
    assert kept is not None
    assert kept.detections == found.detections[:3]
    assert found.scoring_at_least(0.05) is found  # nothing left out: the same result, not a copy


def test_a_result_left_with_no_detection_or_with_none_to_begin_with_is_not_published() -> None:
    assert detections(0.5, 0.3).scoring_at_least(0.6) is None
    assert Detections().scoring_at_least(0.0) is None


def test_a_detection_with_keypoints_is_kept_or_left_out_with_them() -> None:
    eye = Landmark("eye", 3.0, 2.0)
    found = Detections(
        (Detection("face", 0.8, (0.0, 0.0, 5.0, 5.0), (eye,)), Detection("face", 0.3, (9.0, 0.0, 14.0, 5.0), (eye,)))
    )
    kept = found.scoring_at_least(0.5)
    assert kept is not None and kept.to_dict()["detections"] == [found.detections[0].to_dict()]


def test_classes_below_the_threshold_are_left_out() -> None:
    classes = Classifications((ClassScore("cat", 0.6), ClassScore("dog", 0.3), ClassScore("fox", 0.05)))
    kept = classes.scoring_at_least(0.3)
    assert kept is not None and [c.label for c in kept.classes] == ["cat", "dog"]
    assert classes.scoring_at_least(0.61) is None


def test_a_result_with_one_score_is_kept_or_dropped_whole() -> None:
    pose = Keypoints((Keypoint("nose", 1.0, 1.0, 0.9), Keypoint("ear", 2.0, 1.0, 0.3)))  # mean 0.6
    assert pose.scoring_at_least(0.6) is pose
    assert pose.scoring_at_least(0.61) is None
    verdict = Anomaly(score=0.4, threshold=0.5)
    assert verdict.scoring_at_least(0.3) is verdict and verdict.scoring_at_least(0.5) is None


@pytest.mark.parametrize(
    "result", [Segmentation(), Regression((("temperature", 21.5),))], ids=["segmentation", "regression"]
)
def test_a_result_without_scores_is_always_kept(result: Segmentation | Regression) -> None:
    assert result.scoring_at_least(1.0) is result


def test_a_tracked_detection_carries_its_id_and_stationary_flag_and_an_untracked_one_neither() -> None:
    untracked = Detection("car", 0.9, (1.0, 2.0, 3.0, 4.0))
    assert set(untracked.to_dict()) == {"label", "score", "box"}
    tracked = Detection("car", 0.9, (1.0, 2.0, 3.0, 4.0), track_id="1712.500-3", stationary=True)
    assert tracked.to_dict() == untracked.to_dict() | {"track_id": "1712.500-3", "stationary": True}
