"""Typed configuration of every source, discriminated by `type`.

Kept apart from the source implementations so that validating a config file (`check-config`) needs
neither a camera, OpenCV's capture backends nor a serial port.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from edge_runtime.sources.base import SourceConfig

DEFAULT_MAX_IMAGE_PIXELS = 50_000_000  # an 8000×6000 photo (48 MP) passes; decoded, 150 MB of BGR pixels


class Reconnect(SourceConfig):
    """Exponential backoff with jitter: a fleet of boxes does not hammer a recovering camera in step."""

    initial_s: float = Field(
        default=1.0, gt=0, description="seconds before the first retry after a lost connection; doubled at each failure"
    )
    max_s: float = Field(
        default=30.0,
        gt=0,
        description="longest wait in seconds between two retries; raise it for cameras or sensors slow to come back",
    )
    jitter: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="each wait is spread by up to this fraction of itself, so a fleet does not retry in step",
    )


class MotionGate(SourceConfig):
    """Skip inference while the scene does not change (frame difference on a small grey copy)."""

    enabled: bool = Field(default=True, description="false turns the gate off but keeps its settings in the file")
    threshold: int = Field(default=25, ge=1, le=255, description="per-pixel grey-level change that counts")
    min_area: float = Field(default=0.002, gt=0, le=1, description="fraction of the frame that must change")
    keepalive_s: float | None = Field(
        default=10.0,
        gt=0,
        description="let one frame through at least this often in a still scene, so results of a still "
        "object stay fresh; null: only frames with motion (and the first) pass",
    )


class ImageSourceConfig(SourceConfig):
    """What every pipeline that takes frames chooses for itself: which frames it takes, and how it waits."""

    policy: Literal["latest", "every"] = Field(
        default="latest", description="latest: live cameras, never queue stale frames; every: process all"
    )
    max_fps: float | None = Field(
        default=None,
        gt=0,
        description="at most this many frames per second go to the model, the others are dropped before decoding "
        "(counted); null: every frame the camera gives",
    )
    motion: MotionGate | None = Field(
        default=None,
        description="skip inference while the scene does not change; `motion: {}` turns it on with the defaults",
    )


class CaptureSettings(SourceConfig):
    """How a camera is kept open, whether one pipeline opens it or it is named in `sources:` for several."""

    stall_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="seconds without a frame after which the stream counts as frozen and is reopened",
    )
    reconnect: Reconnect = Field(
        default_factory=Reconnect, description="how soon a lost or frozen camera or stream is opened again"
    )


class CameraSourceConfig(CaptureSettings, ImageSourceConfig):
    """A camera, stream, file or folder this pipeline opens by itself."""


class V4l2Camera(CaptureSettings):
    """A V4L2 device: what to open and what to ask it for."""

    type: Literal["v4l2"] = Field(description="a USB or CSI camera on this box (Video4Linux)")
    device: str | int = Field(description="/dev/videoN or its index N", examples=["/dev/video0"])
    width: int | None = Field(
        default=None, gt=0, description="frame width in pixels to ask the camera for; null: the camera's default"
    )
    height: int | None = Field(
        default=None, gt=0, description="frame height in pixels to ask the camera for; null: the camera's default"
    )
    fps: float | None = Field(
        default=None, gt=0, description="frames per second to ask the camera for; null: the camera's default"
    )
    fourcc: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9 ]{4}$",
        description="pixel format to ask the camera for, e.g. MJPG (more frames per second over USB 2) or YUYV",
    )


class StreamCamera(CaptureSettings):
    """A network stream: where it is and how to reach it."""

    type: Literal["stream"] = Field(
        description="an RTSP, HTTP, RTMP, UDP or TCP stream, reopened with backoff when lost or frozen"
    )
    url: str = Field(
        pattern=r"^(rtsp|rtsps|http|https|rtmp|udp|tcp)://",
        description="the stream's URL; credentials in it are masked in logs and results, better given as ${NAME}",
        examples=["rtsp://camera-1.lan:554/stream1"],
    )
    transport: Literal["tcp", "udp"] = Field(
        default="tcp", description="RTSP transport; udp has less latency but loses frames on a busy network"
    )


class VideoFile(CaptureSettings):
    """A video file: which, and how it is played."""

    type: Literal["file"] = Field(description="a video file, played once or looping")
    path: Path = Field(description="the video file; relative to the config file's directory", examples=["clip.mp4"])
    loop: bool = Field(default=False, description="start again at the end instead of ending the source")
    realtime: bool = Field(default=False, description="pace frames at the file's frame rate, like a camera")


class V4l2SourceConfig(V4l2Camera, CameraSourceConfig):
    """A V4L2 device this pipeline opens by itself."""


class StreamSourceConfig(StreamCamera, CameraSourceConfig):
    """A network stream this pipeline opens by itself."""


class FileSourceConfig(VideoFile, CameraSourceConfig):
    """A video file this pipeline plays by itself."""

    policy: Literal["latest", "every"] = Field(
        default="every",
        description="every: process every frame (the file is read as fast as the model takes it); latest: drop "
        "frames the model has no time for, as a live camera does",
    )

    @property
    def unpaced(self) -> bool:
        return not self.realtime and self.max_fps is None


Camera = V4l2Camera | StreamCamera | VideoFile
"""What a camera source opens: a pipeline's own (`V4l2SourceConfig`, ...) or a camera named in `sources:`."""


class FolderSourceConfig(CameraSourceConfig):
    type: Literal["folder"] = Field(description="the images in a folder, in natural order (img2 before img10)")
    path: Path = Field(description="the folder; relative to the config file's directory", examples=["images"])
    pattern: str = Field(
        default="*.jpg", description="which files to take, as a glob; `**/*.png` also searches subfolders"
    )
    loop: bool = Field(
        default=False, description="list the folder again after the last image, picking up new files, instead of ending"
    )
    policy: Literal["latest", "every"] = Field(
        default="every", description="every: process every image; latest: drop images the model has no time for"
    )
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

    length: int = Field(gt=0, description="samples in one window, the model's time axis", examples=[128])
    stride: int = Field(
        gt=0,
        description="samples from the start of one window to the start of the next; less than length overlaps them",
        examples=[64],
    )
    channels: int = Field(default=1, gt=0, description="values in one sample, e.g. 3 for an x, y, z accelerometer")

    @model_validator(mode="after")
    def _stride_within_length(self) -> WindowSpec:
        if self.stride > self.length:
            raise ValueError(f"stride {self.stride} is longer than the window ({self.length}): samples would be lost")
        return self


class SharedSourceConfig(ImageSourceConfig):
    """The frames of a camera named in the top-level `sources:`, captured and decoded once for every pipeline
    that names it; each pipeline takes them at its own `max_fps`, behind its own motion gate."""

    type: Literal["shared"] = Field(
        description="frames of a camera named in the top-level `sources:`, opened once however many pipelines use it"
    )
    name: str = Field(min_length=1, description="the source's name in `sources:`", examples=["front-door"])
    policy: Literal["latest"] = Field(
        default="latest",
        description="latest, the only choice here: a pipeline with no time for a frame skips it, so it never holds "
        "up the capture or the other pipelines on the camera",
    )

    @field_validator("policy", mode="before")
    @classmethod
    def _latest_only(cls, policy: object) -> object:
        if policy == "every":
            raise ValueError(
                "a shared source hands each pipeline its newest frame; policy every would make the capture, and so "
                "every other pipeline on it, wait for the slowest one (give this pipeline its own inline source)"
            )
        return policy


class SensorSourceConfig(SourceConfig):
    window: WindowSpec = Field(description="how samples are grouped into the model's inputs")
    max_payload_bytes: int = Field(
        default=65536, gt=0, description="a longer message or line is dropped and counted as malformed"
    )


class MqttSourceConfig(SensorSourceConfig):
    """Readings published on MQTT topics, on the daemon's own broker connection."""

    type: Literal["mqtt"] = Field(description="sensor readings published on MQTT topics of the daemon's own broker")
    topics: list[str] = Field(
        min_length=1,
        description="topic filters to subscribe to; wildcards allowed, each matching topic gets its own window",
        examples=[["sensors/pump-1/vibration"]],
    )
    payload: Literal["json", "f32le", "i16le", "u8"] = Field(
        default="json",
        description="json: a number, a list of numbers (one sample), or {'values': [...]}; "
        "the others: raw little-endian arrays of whole samples",
    )
    qos: Literal[0, 1, 2] = Field(default=1, description="MQTT QoS of the subscription")


class SerialSourceConfig(SensorSourceConfig):
    type: Literal["serial"] = Field(
        description="text lines of values from a serial port (needs `pip install 'edge-runtime[serial]'`)"
    )
    port: str = Field(description="the serial device, e.g. /dev/ttyUSB0", examples=["/dev/ttyUSB0"])
    baudrate: int = Field(default=115200, gt=0, description="line speed in bits per second, as the sensor sends")
    separator: str = Field(
        default=",", min_length=1, description="between the values of a line; ' ' for any whitespace"
    )
    reconnect: Reconnect = Field(default_factory=Reconnect, description="how soon a lost serial port is opened again")


class ReplaySourceConfig(SensorSourceConfig):
    """Samples replayed from a CSV (one sample per row) or .npy file (samples x channels)."""

    type: Literal["replay"] = Field(description="samples replayed from a CSV file (a sample per row) or a .npy file")
    path: Path = Field(
        description="the CSV or .npy file; relative to the config file's directory", examples=["recording.csv"]
    )
    rate_hz: float | None = Field(
        default=None, gt=0, description="samples per second, as the sensor gave them; null replays as fast as possible"
    )
    loop: bool = Field(default=False, description="start again at the end instead of ending the source")

    @property
    def unpaced(self) -> bool:
        return self.rate_hz is None


AnySource = Annotated[
    V4l2SourceConfig
    | StreamSourceConfig
    | FileSourceConfig
    | SharedSourceConfig
    | FolderSourceConfig
    | MqttSourceConfig
    | SerialSourceConfig
    | ReplaySourceConfig,
    Field(discriminator="type"),
]

NamedSource = Annotated[V4l2Camera | StreamCamera | VideoFile, Field(discriminator="type")]
"""What `sources:` may name: a camera whose capture and decode several pipelines share. It has no frame policy,
rate limit or motion gate: each pipeline on it sets its own."""
