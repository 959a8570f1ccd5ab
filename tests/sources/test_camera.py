"""Video files, live streams and V4L2 devices through the real OpenCV capture and real ffmpeg."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from broker import free_port
from rtsp_relay import RtspRelay
from source_media import FRAMES, StreamServer, read_all

from edge_runtime.errors import ConfigError
from edge_runtime.sources import make_source
from edge_runtime.sources.base import EndOfSource, Frame
from edge_runtime.sources.camera import (
    FFMPEG_OPTIONS_VARIABLE,
    CameraSource,
    ffmpeg_capture_options,
    open_with_ffmpeg,
)
from edge_runtime.sources.configs import FileSourceConfig, MotionGate, Reconnect, StreamSourceConfig, V4l2SourceConfig

FrameNumber = Callable[[np.ndarray], int]


def file_source(path: Path, **fields: object) -> CameraSource:
    source = make_source(FileSourceConfig.model_validate({"type": "file", "path": path, **fields}), "clip")
    assert isinstance(source, CameraSource)
    return source


def wait_until(condition: Callable[[], bool], timeout: float, reading: CameraSource | None = None) -> bool:
    """Poll `condition`, reading frames meanwhile like a pipeline would (which also runs the stall watch)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if reading is not None:
            reading.read(0.1)
        else:
            time.sleep(0.05)
    return condition()


def test_file_once_delivers_every_frame_in_order(moving_video: Path, read_frame_number: FrameNumber) -> None:
    source = file_source(moving_video)
    source.start()
    try:
        frames = read_all(source)
    finally:
        source.close()
    assert [read_frame_number(frame.image) for frame in frames] == list(range(FRAMES))
    assert [frame.index for frame in frames] == list(range(FRAMES))
    assert all(frame.image.shape == (480, 640, 3) and frame.image.dtype == np.uint8 for frame in frames)
    assert all(frame.source == "clip" for frame in frames)
    stamps = [frame.captured_at for frame in frames]
    assert stamps == sorted(stamps) and abs(stamps[0] - time.time()) < 60
    assert (source.stats.delivered, source.stats.dropped) == (FRAMES, 0)
    with pytest.raises(EndOfSource):
        source.read(0.1)


def test_file_loop_starts_over(moving_video: Path, read_frame_number: FrameNumber) -> None:
    source = file_source(moving_video, loop=True)
    source.start()
    try:
        frames = [frame for frame in (source.read(5.0) for _ in range(FRAMES + 30)) if frame is not None]
    finally:
        source.close()
    assert [read_frame_number(frame.image) for frame in frames] == list(range(FRAMES)) + list(range(30))
    assert [frame.index for frame in frames] == list(range(FRAMES + 30))


def test_latest_policy_drops_stale_frames_for_a_slow_reader(moving_video: Path, read_frame_number: FrameNumber) -> None:
    source = file_source(moving_video, realtime=True, policy="latest")
    source.start()
    numbers: list[int] = []
    try:
        while True:
            grabbed_before = source.frames_captured
            try:
                frame = source.read(5.0)
            except EndOfSource:
                break
            assert frame is not None
            number = read_frame_number(frame.image)
            # the newest frame grabbed before this read is number grabbed_before - 1: at most one newer
            assert number >= grabbed_before - 2, (number, grabbed_before)
            numbers.append(number)
            time.sleep(0.15)  # a model much slower than the 30 fps camera
    finally:
        source.close()
    assert numbers == sorted(set(numbers)), "frames came out of order or twice"
    assert source.stats.dropped > 0
    assert source.stats.dropped + source.stats.delivered == FRAMES
    assert len(numbers) < FRAMES / 2


def test_max_fps_keeps_every_third_frame_of_a_30_fps_file(moving_video: Path, read_frame_number: FrameNumber) -> None:
    source = file_source(moving_video, max_fps=10)
    source.start()
    try:
        frames = read_all(source)
    finally:
        source.close()
    assert [read_frame_number(frame.image) for frame in frames] == list(range(0, FRAMES, 3))
    assert source.stats.dropped == FRAMES - len(frames)


def test_realtime_file_is_paced_at_its_frame_rate(moving_video: Path) -> None:
    source = file_source(moving_video, realtime=True, max_fps=5)
    started = time.monotonic()
    source.start()
    try:
        frames = read_all(source)
    finally:
        source.close()
    elapsed = time.monotonic() - started
    assert len(frames) == FRAMES // 6
    assert elapsed > 0.8 * FRAMES / 30  # 3 s of video cannot be played in much less
    spacing = np.diff([frame.captured_at for frame in frames])
    assert np.median(spacing) > 0.1  # 5 fps: 0.2 s apart, give or take a loaded machine


def test_motion_gate_skips_a_still_scene(still_video: Path) -> None:
    gate = MotionGate(keepalive_s=None)
    source = file_source(still_video, motion=gate)
    source.start()
    try:
        frames = read_all(source)
    finally:
        source.close()
    assert len(frames) == 1, "only the first frame of a still scene should pass"
    assert source.stats.dropped == 59


def test_the_source_tells_the_capture_time_of_the_latest_frame_the_gate_held_back(still_video: Path) -> None:
    """What a pipeline following objects reads to learn that time went by while no frame reached it."""
    gated = file_source(still_video, motion=MotionGate(keepalive_s=None))
    assert gated.latest_held() is None
    gated.start()
    try:
        [first] = read_all(gated)
    finally:
        gated.close()
    held = gated.latest_held()
    assert held is not None and first.captured_at < held <= time.time()
    ungated = file_source(still_video)
    ungated.start()
    try:
        assert len(read_all(ungated)) == 60
    finally:
        ungated.close()
    assert ungated.latest_held() is None


def test_motion_gate_keepalive_lets_a_still_scene_through_now_and_then(still_video: Path) -> None:
    source = file_source(still_video, motion=MotionGate(keepalive_s=0.5))
    source.start()
    try:
        frames = read_all(source)
    finally:
        source.close()
    assert len(frames) == 4  # 2 s of video on the file's clock: at 0, 0.5, 1.0 and 1.5 s


def test_motion_gate_passes_a_moving_scene(moving_video: Path) -> None:
    source = file_source(moving_video, motion=MotionGate(keepalive_s=None))
    source.start()
    try:
        frames = read_all(source)
    finally:
        source.close()
    assert len(frames) >= FRAMES - 5
    assert source.stats.dropped == FRAMES - len(frames)


def test_missing_or_undecodable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        file_source(tmp_path / "nothing.mp4").start()
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(os.urandom(4096))
    with pytest.raises(ConfigError, match="cannot be decoded"):
        file_source(garbage).start()


def stream_source(url: str, **fields: object) -> CameraSource:
    settings = {"stall_timeout_s": 1.5, "reconnect": Reconnect(initial_s=0.2, max_s=1.0, jitter=0.1), **fields}
    source = make_source(StreamSourceConfig.model_validate({"type": "stream", "url": url, **settings}), "gate")
    assert isinstance(source, CameraSource)
    return source


def first_frames(source: CameraSource, count: int) -> list[Frame]:
    frames = [frame for frame in (source.read(10.0) for _ in range(count)) if frame is not None]
    assert len(frames) == count, f"only {len(frames)} of {count} frames from the live stream"
    return frames


def outage_warnings(caplog: pytest.LogCaptureFixture, label: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.getMessage().startswith(label)]


def test_rtsp_stream_survives_a_frozen_then_restarted_camera(
    rtsp_relay: RtspRelay, read_frame_number: FrameNumber, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edge_runtime.sources")
    source = stream_source(rtsp_relay.url.replace("rtsp://", "rtsp://viewer:s3cret@"))
    rtsp_relay.start()
    source.start()
    try:
        frames = first_frames(source, 10)
        assert source.stats.connected and source.stats.outages == 0
        assert all(0 <= read_frame_number(frame.image) < FRAMES for frame in frames)
        assert [frame.index for frame in frames] == list(range(10))

        rtsp_relay.frozen = True  # connection open, no packets: only the stall timeout can tell
        assert wait_until(lambda: source.stats.outages == 1, 15.0, reading=source), source.stats
        assert not source.stats.connected
        assert "frozen" in source.stats.last_error

        rtsp_relay.stop()
        rtsp_relay.start()
        assert wait_until(lambda: source.stats.connected, 30.0, reading=source), source.stats
        assert source.read(10.0) is not None
        assert source.stats.reconnects == 1 and source.stats.outages == 1
    finally:
        source.close()
    assert rtsp_relay.setups and all("RTP/AVP/TCP" in transport for transport in rtsp_relay.setups)
    label = f"source gate (rtsp://viewer:***@127.0.0.1:{rtsp_relay.port}/cam)"
    [warning] = outage_warnings(caplog, label)
    assert "frozen" in warning
    assert "reconnected after" in caplog.text
    assert not any("s3cret" in record.getMessage() for record in caplog.records)


def test_rtsp_transport_udp_is_what_the_client_asks_for(rtsp_relay: RtspRelay) -> None:
    """The relay serves TCP only, so a source configured for UDP must fail to connect, and say so."""
    source = stream_source(rtsp_relay.url, transport="udp")
    rtsp_relay.start()
    source.start()
    try:
        assert wait_until(lambda: source.stats.outages == 1 and bool(rtsp_relay.setups), 20.0), source.stats
        assert source.read(0.5) is None
    finally:
        source.close()
    assert "TCP" not in rtsp_relay.setups[0]
    assert source.stats.last_error == (
        f"the input cannot be opened: 127.0.0.1:{rtsp_relay.port} answers, but no stream came: "
        "check the path, the credentials and the codec"
    )
    assert source.stats.reconnects == 0


def test_a_stream_nobody_listens_for_says_so_and_keeps_saying_when_it_retries(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO, logger="edge_runtime.sources")
    port = free_port()
    source = stream_source(f"rtsp://127.0.0.1:{port}/cam")
    source.start()
    try:
        assert wait_until(lambda: source.stats.outages == 1, 10.0), source.stats
        said = f"the input cannot be opened: 127.0.0.1:{port} refused the connection (nothing listens there)"
        assert source.stats.last_error == said
        outage = source.outage()
        assert outage is not None and outage.startswith("unavailable for ") and said in outage
    finally:
        source.close()
    [warning] = outage_warnings(caplog, "source gate")
    assert warning.endswith(tuple(f"; next try in {tenths / 10:.1f} s" for tenths in range(1, 4)))


def test_http_stream_reconnects_after_the_server_goes_away(
    stream_server: StreamServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edge_runtime.sources")
    source = stream_source(stream_server.url)
    stream_server.start()
    source.start()
    try:
        first_frames(source, 10)
        stream_server.kill()  # the connection closes: noticed without waiting for the stall timeout
        assert wait_until(lambda: source.stats.outages == 1, 15.0, reading=source), source.stats
        assert not source.stats.connected
        stream_server.start()
        assert wait_until(lambda: source.stats.reconnects == 1, 30.0, reading=source), source.stats
        assert source.read(10.0) is not None
    finally:
        source.close()
    assert len(outage_warnings(caplog, f"source gate ({stream_server.url})")) == 1


def test_missing_v4l2_device_is_an_outage_retried_until_closed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="edge_runtime.sources")
    config = V4l2SourceConfig(
        type="v4l2", device="/dev/video-missing-camera", reconnect=Reconnect(initial_s=0.05, max_s=0.1)
    )
    source = make_source(config, "usb")
    source.start()
    try:
        assert wait_until(lambda: "still unavailable" in caplog.text, 10.0)
        assert source.read(0.1) is None
    finally:
        started = time.monotonic()
        source.close()
    assert time.monotonic() - started < 5
    assert source.stats.outages == 1 and source.stats.reconnects == 0
    assert not source.stats.connected
    said = "the input cannot be opened: /dev/video-missing-camera does not exist (is the camera plugged in?)"
    assert source.stats.last_error == said
    assert f"source usb (/dev/video-missing-camera): {said}" in caplog.text


def test_ffmpeg_options_per_protocol() -> None:
    assert ffmpeg_capture_options("rtsp://cam/1", "tcp", 2.5) == "rtsp_transport;tcp|timeout;2500000"
    assert ffmpeg_capture_options("rtsps://cam/1", "udp", 1) == "rtsp_transport;udp|timeout;1000000"
    assert ffmpeg_capture_options("http://cam/video.mjpg", "tcp", 10) == "timeout;10000000"
    assert ffmpeg_capture_options("rtmp://cam/live", "tcp", 10) == ""  # there `timeout` means listen


def test_open_with_ffmpeg_restores_the_environment(moving_video: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FFMPEG_OPTIONS_VARIABLE, raising=False)
    capture = open_with_ffmpeg(str(moving_video), "timeout;1000000", [])
    assert capture.isOpened()
    capture.release()
    assert FFMPEG_OPTIONS_VARIABLE not in os.environ
    monkeypatch.setenv(FFMPEG_OPTIONS_VARIABLE, "threads;1")
    open_with_ffmpeg(str(moving_video), "timeout;1000000", []).release()
    assert os.environ[FFMPEG_OPTIONS_VARIABLE] == "threads;1"
