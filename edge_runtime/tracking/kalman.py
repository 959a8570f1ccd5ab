"""A constant-velocity Kalman filter over every track at once, stepped by real elapsed seconds.

The state of a track is [cx, cy, w, h, vx, vy, vw, vh]: box centre and size in pixels, and their rates in
pixels per second. ByteTrack's filter keeps the aspect ratio w/h instead of the width, which suits
pedestrians (whose aspect barely changes) but not a car turning into a driveway, whose width doubles
while its height stays; the association here also needs widths and heights directly (Frigate's distance
divides a displacement by them). BoT-SORT made the same change for the same reason.

Time is seconds, not frames. A camera limited by `max_fps`, or one whose motion gate holds frames back,
hands the tracker frames at irregular intervals, and a filter that steps once per frame would believe an
object moved as far in a two-second gap as in a tenth of a second. Here the prediction moves each box by
its velocity times the real interval, and the uncertainty grows with it: the process noise is a white
acceleration (a person starts, stops and turns), whose covariance over an interval dt is
q·[[dt³/3, dt²/2], [dt²/2, dt]] per coordinate. Every noise scales with the object's own size, as in
ByteTrack: a detector's error on a box, and how fast a box can change, are both proportional to how
large the object appears.

Each coordinate moves only by its own rate, and every noise (process and measurement) is per coordinate,
so the 8×8 covariance is four independent 2×2 blocks, one per coordinate with its rate, and stays so
through every prediction and update. Only their three distinct entries are kept: `spreads` is N×3×4,
[variance of the coordinate, its covariance with the rate, variance of the rate] for cx, cy, w and h.
The filter is then a handful of element-wise numpy operations on N×4 arrays for all tracks at once,
with no matrix inverse: the same arithmetic as the 8×8 form, at a fraction of its cost.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = [
    "CROSS",
    "GATE_95",
    "POSITION",
    "RATE",
    "ConstantVelocityFilter",
    "boxes_from_states",
    "measurements_from_boxes",
    "zero_spreads",
]

Array = npt.NDArray[np.float64]

# The 95 % quantile of the chi-square distribution with 4 degrees of freedom: a measured box whose squared
# Mahalanobis distance from a prediction exceeds it is, with 95 % confidence, not that track's object.
GATE_95 = 9.4877
MIN_SIZE_PX = 1.0  # a predicted width or height never shrinks below a pixel, so ratios stay finite
POSITION, CROSS, RATE = 0, 1, 2  # the rows of a spread


def zero_spreads(count: int) -> Array:
    """Spreads of `count` tracks, all zero: an N×3×4 array stored as 3×4×N, so that each entry of every
    block (a variance, say, of every track's cx, then cy, w and h) is one contiguous run.

    In that order the prediction is one product of the 3×3 step by a 3×4N matrix, and the correction's
    gains come out in the order of the states' columns (see `tracks`), so they are added to them directly,
    without copying them into that order first: together about a third of the filter's time at 20 tracks.
    """
    spreads: Array = np.zeros((3, 4, count)).transpose(2, 0, 1)
    return spreads


def measurements_from_boxes(boxes: Array) -> Array:
    """[x_min, y_min, x_max, y_max] rows to [cx, cy, w, h] rows."""
    sizes = boxes[:, 2:4] - boxes[:, 0:2]
    return np.concatenate([boxes[:, 0:2] + sizes / 2, sizes], axis=1)


def boxes_from_states(states: Array) -> Array:
    """The box part of state rows, as [x_min, y_min, x_max, y_max]."""
    half = states[:, 2:4] / 2
    return np.concatenate([states[:, 0:2] - half, states[:, 0:2] + half], axis=1)


class ConstantVelocityFilter:
    """The filter's noise model; the state arrays belong to the caller (one row per track).

    - `acceleration`: how fast an object may change its velocity, in object sizes per second squared
      (the spectral density of the white acceleration is its square). A walking person changes speed by
      about a body height per second when starting or stopping.
    - `size_acceleration`: the same for the box's width and height, which change more slowly than its
      position (an object approaching the camera grows over seconds).
    - `measurement_noise`: a detector's box error, as a fraction of the box size (ByteTrack: 1/20).
    - `initial_speed`: the spread of a new track's unknown velocity, in object sizes per second.
    """

    def __init__(
        self,
        acceleration: float = 1.0,
        size_acceleration: float = 0.25,
        measurement_noise: float = 0.05,
        initial_speed: float = 1.0,
    ) -> None:
        self.acceleration = acceleration
        self.size_acceleration = size_acceleration
        self.measurement_noise = measurement_noise
        self.initial_speed = initial_speed
        self._noise_scale = np.array([acceleration] * 2 + [size_acceleration] * 2)
        self._step = np.nan  # the interval `_transition` and `_noise_weights` are for
        self._transition = np.eye(3)
        self._noise_weights = np.zeros(3)

    def initiate(self, boxes: Array) -> tuple[Array, Array]:
        """States for new tracks at the given boxes, at rest but with a wide spread of velocity."""
        means = np.zeros((len(boxes), 8), order="F")  # column-major, as the tracker keeps them (`tracks`)
        means[:, :4] = measurements_from_boxes(boxes)
        spreads = np.zeros((len(boxes), 3, 4), order="F")
        spreads[:, POSITION] = (2 * self.measurement_noise * _scale(means)) ** 2
        spreads[:, RATE] = (self.initial_speed * _motion_scale(means)) ** 2
        return means, spreads

    def predict(self, means: Array, spreads: Array, dt: float) -> tuple[Array, Array]:
        """Every state moved `dt` seconds ahead (new arrays; the inputs are left as they were)."""
        means = means.copy()
        predicted = self.predict_in_place(means, spreads, dt)
        return means, predicted.copy(order="K") if predicted is spreads else predicted

    def predict_in_place(self, means: Array, spreads: Array, dt: float) -> Array:
        """`predict` for the tracker's own table: `means` moved in place, and the new spreads returned (the
        old array left as it was), or `spreads` itself when there is no step. The tracker predicts every
        frame, so the step's constants are made once per interval rather than every time."""
        if len(means) == 0 or dt <= 0:
            return spreads
        transition, noise_weights = self._step_constants(dt)
        # The noise scales with the sizes before the step, so it is taken first.
        noise_sizes = (self._noise_scale * _motion_scale(means)) ** 2
        means[:, :4] += dt * means[:, 4:]
        np.maximum(means[:, 2:4], MIN_SIZE_PX, out=means[:, 2:4])
        blocks = spreads.transpose(1, 2, 0)
        if blocks.flags.c_contiguous:  # as `zero_spreads` lays them out: one product of 3×3 by 3×4N
            stepped: Array = (transition @ blocks.reshape(3, -1)).reshape(blocks.shape)
            stepped += noise_weights[:, None, None] * noise_sizes.T
            predicted: Array = stepped.transpose(2, 0, 1)
            return predicted
        noise = noise_weights[:, None] * noise_sizes[:, None, :]
        if len(spreads) > 1 and spreads.flags.f_contiguous:
            # Column-major spreads: four products of 3×3 by 3×N instead of N of 3×3 by 3×4, each element the
            # same sum of three products.
            predicted = (transition @ spreads.T).T
        else:
            predicted = transition @ spreads
        predicted += noise
        return predicted

    def _step_constants(self, dt: float) -> tuple[Array, Array]:
        """Per 2×2 block, F P Fᵀ with F = [[1, dt], [0, 1]] is linear in (variance, covariance, rate variance):
        p' = p + 2 dt c + dt² r, c' = c + dt r, r' = r; and Q adds q·(dt³/3, dt²/2, dt). The matrix of that
        map and Q's weights, for `dt`; a camera's frames mostly come at one interval, so the last is kept."""
        if dt != self._step:  # written into the arrays in place: two arrays made per frame cost more
            transition, weights = self._transition, self._noise_weights
            transition[0, 1], transition[0, 2], transition[1, 2] = 2 * dt, dt * dt, dt
            weights[0], weights[1], weights[2] = dt**3 / 3, dt**2 / 2, dt
            self._step = dt
        return self._transition, self._noise_weights

    def gating_distance(self, means: Array, spreads: Array, boxes: Array) -> Array:
        """Squared Mahalanobis distance of every box (M×4) from every predicted state (N rows): N×M.

        It measures a detection's offset in units of the prediction's own uncertainty: a track that
        has moved steadily for seconds predicts tightly, a new one or one missed for a while loosely.
        """
        if len(means) == 0 or len(boxes) == 0:
            return np.zeros((len(means), len(boxes)))
        offsets = measurements_from_boxes(boxes)[None, :, :] - means[:, None, :4]
        innovation_variance = self._innovation_variance(means, spreads)
        return np.asarray(np.sum(offsets**2 / innovation_variance[:, None, :], axis=2))

    def update(self, means: Array, spreads: Array, boxes: Array) -> tuple[Array, Array]:
        """States corrected by one measured box each (row i by boxes[i]); new arrays."""
        means, spreads = means.copy(), spreads.copy(order="K")
        self.update_in_place(means, spreads, measurements_from_boxes(boxes))
        return means, spreads

    def update_in_place(
        self, means: Array, spreads: Array, measurements: Array, rows: npt.NDArray[np.bool_] | None = None
    ) -> None:
        """`update` for the tracker's own table, on [cx, cy, w, h] measurements: both arrays corrected in place,
        which spares copying them and writing them back. With `rows`, only those rows are corrected; the
        others (missed tracks) keep their states exactly, whatever their measurement row holds."""
        if len(means) == 0:
            return
        innovation = measurements - means[:, :4]
        innovation_variance = self._innovation_variance(means, spreads)
        gains = spreads[:, :2] / innovation_variance[:, None, :]  # K per block: (position, rate) rows
        if rows is None:
            means += (gains * innovation[:, None, :]).reshape(-1, 8)
            np.maximum(means[:, 2:4], MIN_SIZE_PX, out=means[:, 2:4])
        else:
            gains *= rows[:, None, None]  # no gain: the spreads below stay as they were, to the bit
            corrections = (gains * innovation[:, None, :]).reshape(-1, 8)
            np.add(means, corrections, out=means, where=rows[:, None])
            np.maximum(means[:, 2:4], MIN_SIZE_PX, out=means[:, 2:4], where=rows[:, None])
        # (I - K H) P per block: r' = r - kr c, then p' = (1 - kp) p, c' = (1 - kp) c.
        spreads[:, RATE] -= gains[:, 1] * spreads[:, CROSS]
        spreads[:, :2] *= 1 - gains[:, POSITION : POSITION + 1]

    def _innovation_variance(self, means: Array, spreads: Array) -> Array:
        """S = H P Hᵀ + R per coordinate: the spread of a measured box around the predicted one."""
        return np.asarray(spreads[:, POSITION] + (self.measurement_noise * _scale(means)) ** 2)


def _scale(states: Array) -> Array:
    """Per coordinate (cx, cy, w, h), the size that a detector's error scales with: width for x and w,
    height for y and h."""
    sizes = np.maximum(states[:, 2:4], MIN_SIZE_PX)
    return np.concatenate([sizes, sizes], axis=1)


def _motion_scale(states: Array) -> Array:
    """Per coordinate (cx, cy, w, h), the size that motion scales with: the larger side for the position
    (a person walks about a body height per second whichever way, a car drives some lengths per second,
    sideways or not), each side for its own growth."""
    sizes = np.maximum(states[:, 2:4], MIN_SIZE_PX)
    larger = np.maximum(sizes[:, 0:1], sizes[:, 1:2])  # as sizes.max(axis=1), without its Python wrapper
    return np.concatenate([larger, larger, sizes], axis=1)
