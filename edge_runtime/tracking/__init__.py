"""Objects, not frames: stable ids for what a camera's detector finds, and when each object comes and goes.

`Tracker` takes one analysed frame's detections with its capture time and answers with the confirmed
objects present and those that left (`TrackUpdate`); `TrackConfig` is a pipeline's `track:` section.
Importing this package loads numpy, pydantic and `lap` (the assignment solver) and nothing heavier.
"""

from edge_runtime.tracking.config import TrackConfig
from edge_runtime.tracking.objects import TrackedObject, TrackUpdate
from edge_runtime.tracking.tracker import Tracker

__all__ = ["TrackConfig", "TrackUpdate", "TrackedObject", "Tracker"]
