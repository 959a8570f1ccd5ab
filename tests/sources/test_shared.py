"""One capture for several readers, through real OpenCV captures of real ffmpeg servers and video files."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rtsp_relay import RtspRelay
from source_media import FRAMES, StreamServer

from edge_runtime.errors import ConfigError
from edge_runtime.sources import make_source
from edge_runtime.sources.base import EndOfSource, Frame, SourceContext
from edge_runtime.sources.camera import CameraSource
from edge_runtime.sources.configs import Camera, SharedSourceConfig, StreamCamera, StreamSourceConfig, VideoFile
from edge_runtime.sources.shared import SharedSourceConsumer, SharedSources

FrameNumber = Callable[[np.ndarray], int]


def consumer(shared: SharedSources, name: str = "door", **fields: Any) -> SharedSourceConsumer:
    config = SharedSourceConfig.model_validate({"type": "shared", "name": name, **fields})
    source = make_source(config, f"reader-{len(fields)}-{id(config)}", SourceContext(shared=shared))
    assert isinstance(source, SharedSourceConsumer)
    return source


def stream(url: str, **fields: Any) -> Camera:
    return StreamCamera.model_validate({"type": "stream", "url": url, "stall_timeout_s": 3, **fields})


class Reader:
    """Reads a source on a thread of its own like a pipeline's feed thread, `pause_s` after each frame."""

    def __init__(self, source: SharedSourceConsumer, pause_s: float = 0.0) -> None:
        self.source, self.pause_s = source, pause_s
        self.frames: list[Frame] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> Reader:
        self.source.start()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.source.close()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                frame = self.source.read(0.2)
            except EndOfSource:
                return
            if frame is not None:
                self.frames.append(frame)
                self._stop.wait(self.pause_s)

    def rate(self, since: float) -> float:
        """Frames per second received since the wall-clock time `since`."""
        taken = [f for f in self.frames if f.captured_at >= since]
        return len(taken) / max(1e-6, time.time() - since)


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_two_readers_of_one_rtsp_camera_make_one_connection_and_take_their_own_rates(rtsp_relay: RtspRelay) -> None:
    rtsp_relay.start()
    shared = SharedSources({"door": stream(rtsp_relay.url)})
    every, five, slow = consumer(shared), consumer(shared, max_fps=5), consumer(shared)
    with Reader(every) as all_frames, Reader(five) as five_fps, Reader(slow, pause_s=0.5) as sluggish:
        assert wait_for(lambda: len(five_fps.frames) >= 3 and len(sluggish.frames) >= 2, 20.0)
        since = time.time()
        time.sleep(3.0)
        rates = all_frames.rate(since), five_fps.rate(since), sluggish.rate(since)
        figures = shared.figures({"a": "door", "b": "door", "c": "door", "d": None}, lambda *_: 0.0)
    assert rtsp_relay.connections == 1 and len(rtsp_relay.setups) == 1
    # the stream runs at 30 fps; 5 fps is the limiter's (frames on its grid, a frame early or late at the ends)
    assert 3.5 <= rates[1] <= 6.5, rates
    assert rates[0] >= 3 * rates[1], rates
    assert rates[2] <= 2.5, rates  # it takes what it has time for...
    assert sluggish.source.stats.dropped > 0  # ...and drops the rest, counted as its own
    # ...while the reader that keeps up misses only frames it was itself too late for, never the slow one's
    taken = every.stats.delivered + every.stats.dropped
    assert taken >= 0.95 * figures["door"]["decoded"] - 2, (every.stats, figures)
    assert figures["door"]["pipelines"] == ["a", "b", "c"] and figures["door"]["connected"] is True
    assert wait_for(lambda: rtsp_relay.connections == 1 and not shared.figures({}, lambda *_: 0.0), 5.0)


def test_an_exclusive_camera_is_opened_once_for_every_reader(stream_server: StreamServer) -> None:
    """ffmpeg's listen mode serves one client, as a V4L2 device opens for one program: both readers get frames."""
    stream_server.start()
    shared = SharedSources({"door": stream(stream_server.url)})
    with Reader(consumer(shared)) as first, Reader(consumer(shared, max_fps=2)) as second:
        assert wait_for(lambda: len(first.frames) >= 10 and len(second.frames) >= 2, 20.0)
        own = {"type": "stream", "url": stream_server.url, "reconnect": {"initial_s": 5}}
        intruder = make_source(StreamSourceConfig.model_validate(own), "second-opening")
        assert isinstance(intruder, CameraSource)
        intruder.start()
        try:
            assert wait_for(lambda: intruder.stats.outages == 1, 15.0), intruder.stats
            assert intruder.read(0.2) is None  # the camera is taken, by one capture
        finally:
            intruder.close()
        count = len(first.frames)
        assert wait_for(lambda: len(first.frames) > count + 5, 10.0)  # and the one capture runs on


def test_a_reader_leaving_and_coming_back_leaves_the_others_frames_without_a_gap(
    moving_video: Path, read_frame_number: FrameNumber
) -> None:
    """What a reload of one pipeline does to a shared camera: the other reader loses no frame to it."""
    config = VideoFile.model_validate({"type": "file", "path": moving_video, "realtime": True, "loop": True})
    shared = SharedSources({"door": config})
    steady = consumer(shared)
    with Reader(steady) as reader:
        assert wait_for(lambda: len(reader.frames) >= 5, 10.0)
        dropped_before, first = steady.stats.dropped, len(reader.frames)
        for _ in range(3):  # the other pipeline stopped and started again, three times
            with Reader(consumer(shared, max_fps=10)) as other:
                assert wait_for(lambda other=other: len(other.frames) >= 2, 10.0)  # type: ignore[misc]
        assert wait_for(lambda: len(reader.frames) >= first + 10, 10.0)
        numbers = [read_frame_number(frame.image) for frame in reader.frames[first:]]
        dropped = steady.stats.dropped - dropped_before
        read = len(reader.frames)
        captured = shared.figures({}, lambda *_: 0.0)["door"]["frames_captured"]
    missing = sum((after - before) % FRAMES - 1 for before, after in itertools.pairwise(numbers))
    assert missing <= dropped, (numbers, dropped)  # every frame it did not get, it dropped itself (too slow)
    assert [frame.index for frame in reader.frames] == list(range(len(reader.frames)))
    assert captured >= read  # one capture all along: its count never started again


def test_each_reader_has_its_own_motion_gate(still_video: Path) -> None:
    config = VideoFile.model_validate({"type": "file", "path": still_video, "realtime": True})
    shared = SharedSources({"door": config})
    with Reader(consumer(shared, motion={"keepalive_s": None})) as gated, Reader(consumer(shared)) as plain:
        assert wait_for(lambda: len(plain.frames) >= 20, 10.0)
    assert len(gated.frames) == 1  # the first frame, then a still scene
    assert gated.source.latest_held() is not None


def test_a_file_played_to_its_end_ends_every_reader(moving_video: Path) -> None:
    config = VideoFile.model_validate({"type": "file", "path": moving_video, "realtime": True})
    shared = SharedSources({"door": config})
    readers = [consumer(shared), consumer(shared)]
    for reader in readers:
        reader.start()
    try:
        for reader in readers:
            deadline = time.monotonic() + 15
            with pytest.raises(EndOfSource):
                while time.monotonic() < deadline:
                    reader.read(0.5)
    finally:
        for reader in readers:
            reader.close()


def test_frames_are_read_only_so_no_reader_draws_on_anothers(moving_video: Path) -> None:
    config = VideoFile.model_validate({"type": "file", "path": moving_video, "realtime": True})
    shared = SharedSources({"door": config})
    with Reader(consumer(shared)) as reader:
        assert wait_for(lambda: bool(reader.frames), 10.0)
    with pytest.raises(ValueError, match="read-only"):
        reader.frames[0].image[0, 0] = 0


def test_an_outage_is_each_readers_and_the_sources(rtsp_relay: RtspRelay, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="edge_runtime.sources")
    rtsp_relay.start()
    url = rtsp_relay.url.replace("rtsp://", "rtsp://viewer:s3cret@")
    shared = SharedSources({"door": stream(url, reconnect={"initial_s": 0.2, "max_s": 0.5})})
    with Reader(consumer(shared)) as first, Reader(consumer(shared, max_fps=3)) as second:
        assert wait_for(lambda: len(first.frames) >= 3 and len(second.frames) >= 1, 20.0)
        rtsp_relay.frozen = True  # connection open, no packets: the stall watch of the capture tells
        assert wait_for(lambda: not first.source.stats.connected and not second.source.stats.connected, 15.0)
        assert "frozen" in first.source.stats.last_error and first.source.outage() is not None
        assert "door" in shared.outages()
        rtsp_relay.stop()
        rtsp_relay.start()
        assert wait_for(lambda: first.source.stats.reconnects == 1 and second.source.stats.reconnects == 1, 30.0)
        figures = shared.figures({}, lambda *_: 0.0)["door"]
    assert figures["outages"] == 1 and figures["reconnects"] == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # said once, for the camera, not once per reader
    assert warnings[0].startswith(f"source door (rtsp://viewer:***@127.0.0.1:{rtsp_relay.port}/cam): no frame for")
    assert not any("s3cret" in r.getMessage() for r in caplog.records)


def test_a_capture_closes_after_its_last_reader_and_a_name_nobody_gave_is_refused(rtsp_relay: RtspRelay) -> None:
    rtsp_relay.start()
    shared = SharedSources({"door": stream(rtsp_relay.url)})
    with Reader(consumer(shared)) as reader:
        assert wait_for(lambda: bool(reader.frames), 20.0)
    assert shared.figures({}, lambda *_: 0.0) == {}
    shared.update({"yard": stream(rtsp_relay.url)})
    with pytest.raises(ConfigError, match="no source named 'door' in sources: \\(known: yard\\)"):
        consumer(shared).start()
