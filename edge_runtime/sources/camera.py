"""Cameras through OpenCV: V4L2 devices, network streams (RTSP, HTTP, ...) and video files.

Live inputs (`v4l2`, `stream`) never give up: a capture that cannot be opened, ends, or stops
delivering frames for `stall_timeout_s` is released and reopened after a jittered exponential
backoff, and each outage is counted in the source's stats and logged once with the (password-masked)
URL. Stream reads cannot hang: OpenCV's FFmpeg backend gets open and read timeouts, and FFmpeg a
socket timeout. A V4L2 read returns after at most 10 s (the driver's own timeout), and an earlier
stall is still reported from the reading side the moment it exceeds `stall_timeout_s`.

Video files are played once or in a loop, either as fast as they are consumed or, with `realtime`,
paced at the file's own frame rate like a camera. `max_fps` and the motion gate run on the file's
clock (frame number / fps), so the same file gives the same frames on every box.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import cv2

from edge_runtime.backoff import Backoff
from edge_runtime.errors import ConfigError
from edge_runtime.sources.base import SourceContext
from edge_runtime.sources.configs import Camera, ImageSourceConfig, StreamCamera, V4l2Camera, VideoFile
from edge_runtime.sources.frames import FrameSource
from edge_runtime.sources.reconnect import ConnectionMonitor, mask_url, spoken_duration

log = logging.getLogger(__name__)

FFMPEG_OPTIONS_VARIABLE = "OPENCV_FFMPEG_CAPTURE_OPTIONS"
_MIN_OPEN_TIMEOUT_S = 10.0  # RTSP negotiation plus waiting for the first key frame
_DEFAULT_FILE_FPS = 30.0
_OPEN_LOCK = threading.Lock()  # the FFmpeg options travel in a process-wide environment variable


def ffmpeg_capture_options(url: str, transport: str, socket_timeout_s: float) -> str:
    """OpenCV's FFmpeg options for a stream: `key;value` pairs joined by `|`.

    `timeout` is FFmpeg's socket I/O timeout in microseconds for RTSP and HTTP; it is left out for
    other protocols, where it means something else (for RTMP, listening for a connection).
    """
    scheme = urlsplit(url).scheme.lower()
    options = []
    if scheme in ("rtsp", "rtsps"):
        options.append(f"rtsp_transport;{transport}")
    if scheme in ("rtsp", "rtsps", "http", "https"):
        options.append(f"timeout;{round(socket_timeout_s * 1_000_000)}")
    return "|".join(options)


def open_with_ffmpeg(target: str, options: str, params: list[int]) -> cv2.VideoCapture:
    """Open with OpenCV's FFmpeg backend; options a user set in the environment are kept and win."""
    with _OPEN_LOCK:
        previous = os.environ.get(FFMPEG_OPTIONS_VARIABLE)
        combined = "|".join(part for part in (options, previous) if part)
        if combined:
            os.environ[FFMPEG_OPTIONS_VARIABLE] = combined
        try:
            return cv2.VideoCapture(target, cv2.CAP_FFMPEG, params)
        finally:
            if previous is None:
                os.environ.pop(FFMPEG_OPTIONS_VARIABLE, None)
            else:
                os.environ[FFMPEG_OPTIONS_VARIABLE] = previous


class CameraSource(FrameSource):
    config: Camera

    def __init__(self, config: Camera, name: str, context: SourceContext | None = None) -> None:
        """`config` is a pipeline's own camera, which also says which frames the pipeline takes, or a camera
        named in `sources:` (see `shared`), whose frames go to the pipelines that name it instead."""
        selection = config if isinstance(config, ImageSourceConfig) else ImageSourceConfig()
        super().__init__(config, name, context, selection)
        self.target = _describe(config)
        self._monitor = ConnectionMonitor(self.stats, name, self.target)
        self._open_timeout_s = max(config.stall_timeout_s, _MIN_OPEN_TIMEOUT_S)
        self._join_timeout_s = self._open_timeout_s + 2.0
        self._read_started: float | None = None
        self._stall_reported = False
        self._file_fps = _DEFAULT_FILE_FPS
        self._file_frames = 0  # as the container says; 0 when it does not
        self._frames_played = 0
        self._play_started = 0.0

    def _prepare(self) -> None:
        if isinstance(self.config, VideoFile):
            self._file_fps, self._file_frames = probe_video_file(self.config.path)

    def _capture(self) -> None:
        try:
            if isinstance(self.config, VideoFile):
                self._play_file(self.config)
            else:
                self._capture_live()
        finally:
            self._monitor.closed()

    def close(self) -> None:
        super().close()
        self._monitor.closed()

    def outage(self) -> str | None:
        return self._monitor.outage()

    def progress(self) -> str | None:
        if not isinstance(self.config, VideoFile) or self.config.loop or not self._file_frames:
            return None
        played, total = min(self._frames_played, self._file_frames), self._file_frames
        said = f"frame {played} of {total} ({100 * played // total} %)"
        elapsed = time.monotonic() - self._play_started
        if played and elapsed > 0:
            said += f", about {spoken_duration((total - played) * elapsed / played)} left"
        return said

    # live inputs

    def _capture_live(self) -> None:
        reconnect = self.config.reconnect
        backoff = Backoff(reconnect.initial_s, reconnect.max_s, reconnect.jitter)
        while not self.stopping:
            capture = self._open_live()
            if not capture.isOpened():
                capture.release()
                if self._stop.is_set():  # closed while the open waited: no reason to find out, no retry to announce
                    return
                delay = backoff.next_delay()
                self._monitor.lost(f"the input cannot be opened: {_why_not_opened(self.config)}", delay)
                self._wait(delay)
                continue
            try:
                reason = self._pump_live(capture, backoff)
            finally:
                capture.release()
            if reason is None:
                return
            delay = backoff.next_delay()
            self._monitor.lost(reason, delay)
            self._wait(delay)

    def _open_live(self) -> cv2.VideoCapture:
        config = self.config
        if isinstance(config, StreamCamera):
            timeout_ms = round(self._open_timeout_s * 1000)
            read_timeout_ms = round(config.stall_timeout_s * 1000)
            params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, timeout_ms, cv2.CAP_PROP_READ_TIMEOUT_MSEC, read_timeout_ms]
            options = ffmpeg_capture_options(config.url, config.transport, config.stall_timeout_s)
            return open_with_ffmpeg(config.url, options, params)
        assert isinstance(config, V4l2Camera)
        device = int(config.device) if isinstance(config.device, str) and config.device.isdigit() else config.device
        capture = cv2.VideoCapture(device, cv2.CAP_V4L2)
        if capture.isOpened():
            _apply_v4l2_settings(capture, config, self.name)
        return capture

    def _pump_live(self, capture: cv2.VideoCapture, backoff: Backoff) -> str | None:
        """Grab frames until the input fails (returns why) or the source is closed (returns None)."""
        receiving = False
        last_frame = time.monotonic()
        stall = 0.95 * self.config.stall_timeout_s  # a little less: timeouts fire a hair early or late
        while not self.stopping:
            self._read_started = started = time.monotonic()
            grabbed = capture.grab()
            self._read_started = None
            now = time.monotonic()
            # a read that hit the timeout may still return frames the decoder held back: reconnect anyway
            if self._stall_reported or max(now - started, 0.0 if grabbed else now - last_frame) >= stall:
                self._stall_reported = False
                return f"no frame for {max(now - started, now - last_frame):.1f} s: the stream is frozen"
            if not grabbed:
                return "the input ended or a frame could not be read"
            captured_at, last_frame = time.time(), now
            if not receiving:
                receiving = True
                self._monitor.connected()
                backoff.reset()
            if not self._admit(now):
                continue
            decoded, image = capture.retrieve()
            if decoded and image is not None:
                self._offer(image, captured_at, now)
        return None

    def _watch(self) -> None:
        """Report a frozen stream from the reading side, while the capture thread still waits in a read."""
        started = self._read_started
        if started is None or self._stall_reported or not self.stats.connected:
            return
        waited = time.monotonic() - started
        if waited > self.config.stall_timeout_s:
            self._stall_reported = True
            self._monitor.lost(f"no frame for {waited:.1f} s: the stream is frozen")

    # files

    def _play_file(self, config: VideoFile) -> None:
        frame_period = 1.0 / self._file_fps
        frames_played = 0
        started = self._play_started = time.monotonic()
        self._monitor.connected()
        while not self.stopping:
            capture = open_with_ffmpeg(str(config.path), "", [])
            played_before = frames_played
            try:
                while not self.stopping:
                    frame_time = frames_played * frame_period
                    if config.realtime and self._wait(started + frame_time - time.monotonic()):
                        return
                    if not capture.grab():
                        break
                    captured_at = time.time()
                    frames_played = self._frames_played = frames_played + 1
                    if self._admit(frame_time):
                        decoded, image = capture.retrieve()
                        if decoded and image is not None:
                            self._offer(image, captured_at, frame_time)
            finally:
                capture.release()
            if not config.loop or frames_played == played_before:
                return


def _describe(config: Camera) -> str:
    if isinstance(config, StreamCamera):
        return mask_url(config.url)
    if isinstance(config, V4l2Camera):
        device = str(config.device)
        return f"/dev/video{device}" if device.isdigit() else device
    if isinstance(config, VideoFile):
        return str(config.path)
    raise ConfigError(f"camera sources do not handle type {getattr(config, 'type', '?')!r}")


def _why_not_opened(config: Camera) -> str:
    """One line of our own in place of FFmpeg's and V4L2's native messages, which are silenced.

    For a network stream, a TCP connection to its host tells an unreachable camera from one that
    answers but would not stream (a wrong path, credentials or codec).
    """
    if isinstance(config, V4l2Camera):
        device = Path(_describe(config))
        if not device.exists():
            return f"{device} does not exist (is the camera plugged in?)"
        if not os.access(device, os.R_OK | os.W_OK):
            return f"no permission to open {device} (add the service's user to the video group)"
        return f"{device} exists but would not open (busy in another program, or not a capture device)"
    if not isinstance(config, StreamCamera):
        return "unknown reason"
    parts = urlsplit(config.url)
    default_ports = {"rtsp": 554, "rtsps": 322, "http": 80, "https": 443, "rtmp": 1935}
    try:
        port = parts.port or default_ports.get(parts.scheme.lower())
    except ValueError:
        return f"the URL's port is not a number: {mask_url(config.url)}"
    if parts.hostname is None or port is None:
        return "FFmpeg could not open the URL"
    try:
        with socket.create_connection((parts.hostname, port), timeout=min(5.0, config.stall_timeout_s)):
            pass
    except socket.gaierror as error:
        return f"host {parts.hostname} cannot be resolved ({error.strerror})"
    except TimeoutError:
        return f"{parts.hostname}:{port} does not answer (timed out)"
    except ConnectionRefusedError:
        return f"{parts.hostname}:{port} refused the connection (nothing listens there)"
    except OSError as error:
        return f"{parts.hostname}:{port} cannot be reached: {error.strerror or error}"
    return f"{parts.hostname}:{port} answers, but no stream came: check the path, the credentials and the codec"


def probe_video_file(path: Path) -> tuple[float, int]:
    """The file's frame rate and frame count (0 if unknown); a missing or undecodable file is a
    configuration error, not an outage."""
    if not path.is_file():
        raise ConfigError(f"video file {path} does not exist")
    capture = open_with_ffmpeg(str(path), "", [])
    try:
        if not capture.isOpened() or not capture.grab():
            raise ConfigError(f"video file {path} cannot be decoded by OpenCV's FFmpeg backend")
        fps = float(capture.get(cv2.CAP_PROP_FPS))
        frames = max(0, int(capture.get(cv2.CAP_PROP_FRAME_COUNT)))
    finally:
        capture.release()
    if not 0 < fps <= 1000:
        log.info("video file %s does not say its frame rate; assuming %.0f fps", path, _DEFAULT_FILE_FPS)
        return _DEFAULT_FILE_FPS, frames
    return fps, frames


def _apply_v4l2_settings(capture: cv2.VideoCapture, config: V4l2Camera, name: str) -> None:
    """Ask the driver for the configured format; it may pick the nearest it supports, so say what it chose."""
    wanted: list[tuple[str, int, float]] = []
    if config.fourcc:
        code = cv2.VideoWriter.fourcc(*config.fourcc)
        capture.set(cv2.CAP_PROP_FOURCC, code)
        wanted.append(("fourcc", cv2.CAP_PROP_FOURCC, float(code)))
    for label, prop, value in (
        ("width", cv2.CAP_PROP_FRAME_WIDTH, config.width),
        ("height", cv2.CAP_PROP_FRAME_HEIGHT, config.height),
        ("fps", cv2.CAP_PROP_FPS, config.fps),
    ):
        if value is not None:
            capture.set(prop, float(value))
            wanted.append((label, prop, float(value)))
    for label, prop, value in wanted:
        actual = float(capture.get(prop))
        if abs(actual - value) > 0.01 * max(1.0, abs(value)):
            shown = _fourcc_text(actual) if label == "fourcc" else f"{actual:g}"
            asked = config.fourcc if label == "fourcc" else f"{value:g}"
            log.warning("source %s: camera %s gives %s %s instead of %s", name, config.device, label, shown, asked)


def _fourcc_text(code: float) -> str:
    number = int(code)
    return "".join(chr((number >> shift) & 0xFF) for shift in (0, 8, 16, 24))
