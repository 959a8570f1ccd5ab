"""Typed configuration of every source, discriminated by `type`.

Kept apart from the source implementations so that validating a config file (`check-config`) needs
neither a camera, OpenCV's capture backends nor a serial port.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from edge_runtime.sources.base import SourceConfig

DEFAULT_MAX_IMAGE_PIXELS = 50_000_000  # an 8000×6000 photo (48 MP) passes; decoded, 150 MB of BGR pixels


class Reconnect(SourceConfig):
    """Exponential backoff with jitter: a fleet of boxes does not hammer a recovering camera in step."""

    initial_s: float = Field(default=1.0, gt=0)
    max_s: float = Field(default=30.0, gt=0)
    jitter: float = Field(default=0.2, ge=0, le=1)


class MotionGate(SourceConfig):
    """Skip inference while the scene does not change (frame difference on a small grey copy)."""

    enabled: bool = True
    threshold: int = Field(default=25, ge=1, le=255, description="per-pixel grey-level change that counts")
    min_area: float = Field(default=0.002, gt=0, le=1, description="fraction of the frame that must change")
    keepalive_s: float | None = Field(
        default=10.0,
        gt=0,
        description="let one frame through at least this often in a still scene, so results of a still "
        "object stay fresh; null: only frames with motion (and the first) pass",
    )


class CameraSourceConfig(SourceConfig):
    policy: Literal["latest", "every"] = Field(
        default="latest", description="latest: live cameras, never queue stale frames; every: process all"
    )
    max_fps: float | None = Field(default=None, gt=0)
    motion: MotionGate | None = None
    stall_timeout_s: float = Field(default=10.0, gt=0, description="no frame for this long means a frozen stream")
    reconnect: Reconnect = Field(default_factory=Reconnect)


class V4l2SourceConfig(CameraSourceConfig):
    type: Literal["v4l2"]
    device: str | int = Field(description="/dev/videoN or its index N")
    width: int | None = Field(default=None, gt=0)
    height: int | None = Field(default=None, gt=0)
    fps: float | None = Field(default=None, gt=0)
    fourcc: str | None = Field(default=None, pattern=r"^[A-Za-z0-9 ]{4}$", description="e.g. MJPG, YUYV")


class StreamSourceConfig(CameraSourceConfig):
    type: Literal["stream"]
    url: str = Field(pattern=r"^(rtsp|rtsps|http|https|rtmp|udp|tcp)://", description="RTSP/HTTP stream URL")
    transport: Literal["tcp", "udp"] = "tcp"


class FileSourceConfig(CameraSourceConfig):
    type: Literal["file"]
    path: Path
    loop: bool = False
    realtime: bool = Field(default=False, description="pace frames at the file's frame rate, like a camera")
    policy: Literal["latest", "every"] = "every"

    @property
    def unpaced(self) -> bool:
        return not self.realtime and self.max_fps is None


class FolderSourceConfig(CameraSourceConfig):
    type: Literal["folder"]
    path: Path
    pattern: str = "*.jpg"
    loop: bool = False
    policy: Literal["latest", "every"] = "every"
    max_image_pixels: int = Field(
        default=DEFAULT_MAX_IMAGE_PIXELS,
        ge=1,
        description="an image whose header declares more pixels is skipped before it is decoded",
    )

    @property
    def unpaced(self) -> bool:
        return self.max_fps is None


class WindowSpec(SourceConfig):
    """How samples become model inputs: `length` samples of `channels` values, a new window every `stride`."""

    length: int = Field(gt=0)
    stride: int = Field(gt=0)
    channels: int = Field(default=1, gt=0)

    @model_validator(mode="after")
    def _stride_within_length(self) -> WindowSpec:
        if self.stride > self.length:
            raise ValueError(f"stride {self.stride} is longer than the window ({self.length}): samples would be lost")
        return self


class SensorSourceConfig(SourceConfig):
    window: WindowSpec
    max_payload_bytes: int = Field(default=65536, gt=0)


class MqttSourceConfig(SensorSourceConfig):
    """Readings published on MQTT topics, on the daemon's own broker connection."""

    type: Literal["mqtt"]
    topics: list[str] = Field(min_length=1)
    payload: Literal["json", "f32le", "i16le", "u8"] = Field(
        default="json",
        description="json: a number, a list of numbers (one sample), or {'values': [...]}; "
        "the others: raw little-endian arrays of whole samples",
    )
    qos: Literal[0, 1, 2] = 1


class SerialSourceConfig(SensorSourceConfig):
    type: Literal["serial"]
    port: str = Field(description="e.g. /dev/ttyUSB0")
    baudrate: int = Field(default=115200, gt=0)
    separator: str = Field(
        default=",", min_length=1, description="between the values of a line; ' ' for any whitespace"
    )
    reconnect: Reconnect = Field(default_factory=Reconnect)


class ReplaySourceConfig(SensorSourceConfig):
    """Samples replayed from a CSV (one sample per row) or .npy file (samples x channels)."""

    type: Literal["replay"]
    path: Path
    rate_hz: float | None = Field(default=None, gt=0, description="samples per second; None replays at once")
    loop: bool = False

    @property
    def unpaced(self) -> bool:
        return self.rate_hz is None


AnySource = Annotated[
    V4l2SourceConfig
    | StreamSourceConfig
    | FileSourceConfig
    | FolderSourceConfig
    | MqttSourceConfig
    | SerialSourceConfig
    | ReplaySourceConfig,
    Field(discriminator="type"),
]
