"""The cascade stage of a camera pipeline: second models on the crops of what the detector found.

It runs on the post thread after decoding and, with tracking, after the tracker has marked each detection
with its object's id (see `objects`: the tracked stage calls it before its listeners, so events already see
what the cascade found). Each stage of the pipeline's `cascade:` section in turn:

1. picks the detections it looks at: of its labels, at least `min_width` x `min_height` pixels; without
   tracking the `max_crops` best-scoring of them, every frame; with tracking only confirmed objects whose
   re-inference is due (`tracking.reinference`), those waiting longest first, at most `max_crops`;
2. cuts each box out of the frame with `padding` around it (clipped to the frame) and preprocesses it as
   the stage model's manifest says; a crop that cannot be preprocessed is counted and skipped;
3. runs the frame's crops as one batch on the model with its batch dimension freed, where the backend frees
   it and a batch gives each crop the answer it gets alone (checked once when the stage starts, as served
   models are), and otherwise side by side on the model's async runner. Both go through the stage's own
   runners, never through a model's synchronous `infer`, since the model pool may share one loaded model
   between pipelines;
4. decodes each crop's outputs and maps them back to frame pixels (the decoder maps to the crop's pixels
   through the crop's transform; the crop's corner is added), then attaches them to the detection.

What is attached, and for how long: a classifier's answer with `attach: sub_label` is the object's name.
Without tracking it is each frame's top class; with tracking it is given only by `consensus` over the
object's attempts and then stays with the object on every frame, and a newly given sub-label is announced
on `<pipeline>/objects/<id>/update`. Class scores under `attributes` also stay with a tracked object until
its next attempt (DeepStream keeps a secondary classifier's answer on the object likewise). Keypoints
under `attributes` are positions in the frame they were found in, so they are attached to that frame's
detection only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from edge_runtime.backends.base import AsyncRunner, Outputs
from edge_runtime.config.cascade import CascadeStageConfig
from edge_runtime.decoders.base import Decoder
from edge_runtime.decoders.decoded import (
    Attribute,
    Classifications,
    Decoded,
    Detection,
    Detections,
    Keypoint,
    Keypoints,
    SubLabel,
)
from edge_runtime.pipeline.preprocess import IN_FRAME_MARGIN, Preprocessor, preprocessor_for
from edge_runtime.placement.model import LoadedModel
from edge_runtime.sources.base import Frame
from edge_runtime.tracking.consensus import Consensus
from edge_runtime.tracking.objects import TrackUpdate
from edge_runtime.tracking.reinference import ReinferRule

log = logging.getLogger(__name__)

__all__ = ["Cascade", "CascadeStage", "Crop", "CropCounts", "SubLabelAssigned", "crop_region"]

SubLabelAssigned = Callable[[str, str, str, SubLabel, float], None]  # object id, its label, stage, sub-label, time


@dataclass(frozen=True)
class Crop:
    """One detection's crop: where it lies in the frame, and the stage model's input made of it."""

    index: int  # the detection's position in the frame's detections
    left: int
    top: int
    tensor: np.ndarray
    transform: Any  # FrameTransform: model coordinates to the crop's pixels


@dataclass
class CropCounts:
    """Crops run through the stage's model, and crops skipped because preprocessing them failed."""

    run: int = 0
    failed: int = 0


def crop_region(
    box: tuple[float, float, float, float], padding: float, width: int, height: int
) -> tuple[int, int, int, int]:
    """The pixels (left, top, right, bottom; right and bottom exclusive) of `box` with `padding` times its width
    and height added on each side, rounded outwards to whole pixels and clipped to a `width` x `height` frame."""
    x_min, y_min, x_max, y_max = box
    pad_x, pad_y = (x_max - x_min) * padding, (y_max - y_min) * padding
    left = max(0, int(np.floor(x_min - pad_x)))
    top = max(0, int(np.floor(y_min - pad_y)))
    right = min(width, int(np.ceil(x_max + pad_x)))
    bottom = min(height, int(np.ceil(y_max + pad_y)))
    return left, top, right, bottom


class _Runs:
    """The outputs of one frame's requests, gathered from the runner's callback thread."""

    def __init__(self) -> None:
        self.outputs: dict[int, Outputs] = {}
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()

    def __call__(self, key: Any, outputs: Outputs | None, error: BaseException | None) -> None:
        with self.lock:
            if outputs is not None:
                self.outputs[int(key)] = outputs
            elif error is not None:
                self.errors.append(error)


class CascadeStage:
    """One stage: its model's runners, its decoder and, with tracking, its per-object rules.

    Not thread-safe: the pipeline's post thread calls `run`. `batched` is the model with its batch dimension
    freed, already found sound for batches, or None to run crops side by side on `model`."""

    def __init__(
        self,
        config: CascadeStageConfig,
        model: LoadedModel,
        decoder: Decoder,
        batched: LoadedModel | None = None,
        tracked: bool = False,
    ) -> None:
        self.config = config
        self.model = model
        self.batched = batched
        self.decoder = decoder
        self.tracked = tracked
        self.counts = CropCounts()
        self._labels = frozenset(config.labels)
        self._preprocess: Preprocessor = preprocessor_for(model.input_specs[0], model.inputs[0])
        self._runs = _Runs()
        self._runner: AsyncRunner = model.backend.async_runner(self._runs, config.model.max_in_flight)
        self._batch_runner: AsyncRunner | None = (
            batched.backend.async_runner(self._runs, 1) if batched is not None else None
        )
        self.reinfer = ReinferRule(config.reinfer)
        self.consensus = Consensus(config.consensus)
        self._kept: dict[str, tuple[tuple[str, Attribute], ...]] = {}  # a tracked object's class scores
        self._last_attempt: dict[str, float] = {}

    def close(self) -> None:
        self._runner.close()
        if self._batch_runner is not None:
            self._batch_runner.close()

    def forget(self, object_id: str) -> None:
        """The object ended: its rules' state and what was kept of it go."""
        self.reinfer.forget(object_id)
        self.consensus.forget(object_id)
        self._kept.pop(object_id, None)
        self._last_attempt.pop(object_id, None)

    def run(
        self, frame: Frame, detections: list[Detection], announce: SubLabelAssigned | None = None
    ) -> list[Detection]:
        """The frame's detections with this stage's answers attached (a new list; `detections` is not changed)."""
        chosen = self._chosen(detections, frame.captured_at)
        crops = self._crops(frame.image, detections, chosen)
        answers = self._infer(crops)
        result = list(detections)
        by_index = {crop.index: (crop, answer) for crop, answer in zip(crops, answers, strict=True)}
        for index, detection in enumerate(detections):
            if detection.label not in self._labels:
                continue
            crop, answer = by_index.get(index, (None, None))
            result[index] = self._attached(detection, answer, crop, frame, announce)
        return result

    def _chosen(self, detections: Sequence[Detection], now: float) -> list[int]:
        """Positions of the detections to crop this frame (see the module's step 1)."""
        config = self.config
        fit = [
            index
            for index, d in enumerate(detections)
            if d.label in self._labels
            and d.box[2] - d.box[0] >= config.min_width
            and d.box[3] - d.box[1] >= config.min_height
            and d.box[2] > d.box[0]
            and d.box[3] > d.box[1]
        ]
        if not self.tracked:
            return sorted(fit, key=lambda index: -detections[index].score)[: config.max_crops]
        due = [
            index
            for index in fit
            if (object_id := detections[index].track_id) is not None
            and self.reinfer.due(object_id, _area(detections[index]), now)
        ]
        due.sort(key=lambda index: self._last_attempt.get(detections[index].track_id or "", float("-inf")))
        return due[: config.max_crops]

    def _crops(self, image: np.ndarray, detections: Sequence[Detection], chosen: list[int]) -> list[Crop]:
        height, width = image.shape[:2]
        crops = []
        for index in chosen:
            try:
                left, top, right, bottom = crop_region(detections[index].box, self.config.padding, width, height)
                if right - left < 1 or bottom - top < 1:
                    raise ValueError(f"the crop {left},{top}-{right},{bottom} holds no pixel")
                tensor, transform = self._preprocess(image[top:bottom, left:right])
            except Exception as error:  # no pixel left on the frame, a box that is not a number, a failed resize
                self.counts.failed += 1
                log.debug("cascade %s: a crop could not be preprocessed: %s", self.config.name, error)
                continue
            crops.append(Crop(index, left, top, tensor, transform))
        return crops

    def _infer(self, crops: list[Crop]) -> list[Decoded | None]:
        """Each crop's decoded answer, None where its inference or decoding failed."""
        if not crops:
            return []
        runs = self._runs
        runs.outputs.clear()
        runs.errors.clear()
        if self._batch_runner is not None and len(crops) > 1:
            self._batch_runner.submit([np.concatenate([crop.tensor for crop in crops])], 0)
            self._batch_runner.wait_all()
            joined = runs.outputs.get(0)
            per_crop: list[Outputs | None] = (
                [[output[row : row + 1] for output in joined] for row in range(len(crops))]
                if joined is not None
                else [None] * len(crops)
            )
        else:
            for position, crop in enumerate(crops):
                self._runner.submit([crop.tensor], position)
            self._runner.wait_all()
            per_crop = [runs.outputs.get(position) for position in range(len(crops))]
        for error in runs.errors:
            log.warning("cascade %s: inference failed: %s", self.config.name, error)
        self.counts.run += len(crops)
        specs = (self.batched if self.batched is not None and len(crops) > 1 else self.model).outputs
        answers: list[Decoded | None] = []
        for crop, outputs in zip(crops, per_crop, strict=True):
            try:
                answers.append(self.decoder.decode(outputs, specs, crop.transform) if outputs is not None else None)
            except Exception:
                log.exception("cascade %s: decoding a crop's outputs failed", self.config.name)
                answers.append(None)
        return answers

    def _attached(
        self,
        detection: Detection,
        answer: Decoded | None,
        crop: Crop | None,
        frame: Frame,
        announce: SubLabelAssigned | None,
    ) -> Detection:
        """`detection` with what this stage knows of it now: this frame's answer, and with tracking what it
        kept of the object (its sub-label, its class scores)."""
        now = frame.captured_at
        height, width = frame.image.shape[:2]
        size = (int(width), int(height))
        object_id = detection.track_id if self.tracked else None
        if object_id is not None and crop is not None:
            self.reinfer.attempted(object_id, _area(detection), now)
            self._last_attempt[object_id] = now
        added: tuple[tuple[str, Attribute], ...] = ()
        sub_label = None
        if isinstance(answer, Keypoints) and crop is not None:
            added = ((self.config.name, _in_frame(answer.keypoints, crop, *size)),)
        elif isinstance(answer, Classifications) and answer.classes:
            if self.config.attach == "attributes":
                added = tuple((c.label, float(c.score)) for c in answer.classes if c.score >= self.config.min_score)
                if object_id is not None:
                    self._kept[object_id] = added
            elif object_id is not None:
                top = answer.classes[0]
                assigned = self.consensus.add(object_id, top.label, top.score)
                if assigned is not None and announce is not None:
                    announce(object_id, detection.label, self.config.name, assigned, now)
            elif answer.classes[0].score >= self.config.min_score:
                sub_label = SubLabel(answer.classes[0].label, answer.classes[0].score)
        if object_id is not None:
            sub_label = self.consensus.sub_label(object_id) if self.config.attach == "sub_label" else None
            if not added:
                added = self._kept.get(object_id, ())
        if sub_label is None and not added:
            return detection
        return replace(
            detection,
            sub_label=sub_label if sub_label is not None else detection.sub_label,
            attributes=(*detection.attributes, *added),
        )

    def kept(self, object_id: str) -> tuple[SubLabel | None, tuple[tuple[str, Attribute], ...]]:
        """What this stage holds of a tracked object between attempts: its sub-label and its class scores."""
        return self.consensus.sub_label(object_id), self._kept.get(object_id, ())


def _area(detection: Detection) -> float:
    x_min, y_min, x_max, y_max = detection.box
    return max(x_max - x_min, 0.0) * max(y_max - y_min, 0.0)


def _in_frame(points: Sequence[Keypoint], crop: Crop, width: int, height: int) -> tuple[Keypoint, ...]:
    """Keypoints in the crop's pixels moved to the frame's (the crop's corner added), each judged anew on the
    `width` x `height` frame: a point beyond the crop's edge may still lie on the frame."""
    moved = []
    for point in points:
        x, y = point.x + crop.left, point.y + crop.top
        margin = IN_FRAME_MARGIN
        on_frame = -margin <= x <= width + margin and -margin <= y <= height + margin
        moved.append(replace(point, x=x, y=y, in_frame=on_frame))
    return tuple(moved)


class Cascade:
    """A pipeline's stages in order, and what they announce. Not thread-safe: the post thread calls it."""

    def __init__(self, stages: Sequence[CascadeStage], announce: SubLabelAssigned | None = None) -> None:
        self.stages = tuple(stages)
        self._announce = announce
        self._report: Callable[[int, int], None] = lambda _run, _failed: None
        self._reported = CropCounts()

    def report_to(self, report: Callable[[int, int], None]) -> None:
        """After each frame, tell `report` how many crops ran and how many failed since the frame before."""
        self._report = report

    def on_frame(self, frame: Frame, decoded: Detections, update: TrackUpdate | None = None) -> Detections:
        """The frame's detections with every stage's answers attached; `update`: the tracker's answer for this
        frame, whose ended objects are forgotten."""
        if update is not None:
            self.ended(update)
        detections = list(decoded.detections)
        for stage in self.stages:
            detections = stage.run(frame, detections, self._announce)
        now = self.crop_counts()
        if now != self._reported:
            self._report(now.run - self._reported.run, now.failed - self._reported.failed)
            self._reported = now
        return Detections(tuple(detections))

    def ended(self, update: TrackUpdate) -> None:
        """Forget the objects that left: their rules' state would otherwise grow for as long as the box runs."""
        for obj in update.ended:
            for stage in self.stages:
                stage.forget(obj.id)

    def findings(self, object_id: str) -> tuple[SubLabel | None, tuple[tuple[str, Attribute], ...]]:
        """A tracked object's sub-label and class scores as the stages hold them now, for its events."""
        sub_label: SubLabel | None = None
        attributes: tuple[tuple[str, Attribute], ...] = ()
        for stage in self.stages:
            label, scores = stage.kept(object_id)
            sub_label = label or sub_label
            attributes = (*attributes, *scores)
        return sub_label, attributes

    def crop_counts(self) -> CropCounts:
        return CropCounts(sum(s.counts.run for s in self.stages), sum(s.counts.failed for s in self.stages))

    def close(self) -> None:
        for stage in self.stages:
            stage.close()
