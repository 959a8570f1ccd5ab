"""Objects, not frames: stable ids for what a camera's detector finds, and when each object comes and goes.

`TrackConfig` is a pipeline's `track:` section.
"""

from edge_runtime.tracking.config import TrackConfig

__all__ = ["TrackConfig"]
