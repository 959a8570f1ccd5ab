"""Text lines over a real (pseudo-terminal) serial port, read by pyserial."""

from __future__ import annotations

import contextlib
import logging
import os
import time
import tty
from collections.abc import Iterator

import numpy as np
import pytest
from waiting import wait_for

from edge_runtime.sources import make_source
from edge_runtime.sources.base import Window
from edge_runtime.sources.configs import SerialSourceConfig
from edge_runtime.sources.serial_sensor import MalformedLineError, SerialSensor, parse_line


class PseudoTerminal:
    """A pty pair: the source opens the slave path like /dev/ttyUSB0, the test writes to the master."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        self.path = os.ttyname(self.slave)

    def send(self, text: str) -> None:
        os.write(self.master, text.encode())

    def unplug(self) -> None:
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def port() -> Iterator[PseudoTerminal]:
    terminal = PseudoTerminal()
    yield terminal
    terminal.unplug()


def serial_source(path: str, **fields: object) -> SerialSensor:
    config = SerialSourceConfig.model_validate(
        {"type": "serial", "port": path, "window": {"length": 3, "stride": 1, "channels": 2}, **fields}
    )
    source = make_source(config, "imu")
    assert isinstance(source, SerialSensor)
    return source


def read_windows(source: SerialSensor, count: int) -> list[Window]:
    windows = [window for window in (source.read(10.0) for _ in range(count)) if window is not None]
    assert len(windows) == count, f"only {len(windows)} of {count} windows arrived"
    return windows


def test_parse_line() -> None:
    np.testing.assert_array_equal(parse_line(b"1.5, -2\r", ",", 2), [[1.5, -2]])
    np.testing.assert_array_equal(parse_line(b"  3\t4  ", " ", 2), [[3, 4]])
    assert parse_line(b"   \r", ",", 2) is None
    for line, problem in [
        (b"1,2,3", "3 values"),
        (b"1,x", "not all values are numbers"),
        (b"1,nan", "finite"),
        (b"1,1e39", "finite"),
        (b"\xff\xfe", "UTF-8"),
    ]:
        with pytest.raises(MalformedLineError, match=problem):
            parse_line(line, ",", 2)


def test_lines_become_windows_and_bad_lines_are_counted(port: PseudoTerminal) -> None:
    source = serial_source(port.path, max_payload_bytes=64)
    source.start()
    try:
        assert wait_for(lambda: source.stats.connected)  # pyserial flushes what arrived before it opened
        port.send(".5,\n")  # the first line, cut off as if plugged in mid-line: dropped, not counted
        port.send("0,10\n1,11\r\n")
        port.send("oops\n2,12\n")
        port.send("9" * 100 + "\n")  # longer than max_payload_bytes
        port.send("\n3,13\n4,1")  # a blank line, then a line split across writes
        time.sleep(0.3)
        port.send("4\n")
        windows = read_windows(source, 3)
        assert wait_for(lambda: source.stats.malformed == 2), source.stats
    finally:
        source.close()
    assert [w.samples[:, 1].tolist() for w in windows] == [[10, 11, 12], [11, 12, 13], [12, 13, 14]]
    assert all(w.samples.dtype == np.float32 and w.samples.shape == (3, 2) for w in windows)
    assert source.stats.outages == 0 and not source.stats.connected


def test_an_unplugged_port_is_an_outage_and_is_retried(port: PseudoTerminal, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="edge_runtime.sources")
    source = serial_source(port.path, reconnect={"initial_s": 0.05, "max_s": 0.2})
    source.start()
    try:
        assert wait_for(lambda: source.stats.connected)
        port.send("1,1\n2,2\n3,3\n")
        read_windows(source, 1)
        assert source.stats.connected
        port.unplug()
        assert wait_for(lambda: source.stats.outages == 1), source.stats
        assert not source.stats.connected
    finally:
        started = time.monotonic()
        source.close()
    assert time.monotonic() - started < 5
    assert f"source imu ({port.path})" in caplog.text
    assert source.stats.reconnects == 0


def test_a_port_that_never_existed_is_an_outage() -> None:
    source = serial_source("/dev/ttyUSB-not-plugged-in", reconnect={"initial_s": 0.05, "max_s": 0.1})
    source.start()
    try:
        assert wait_for(lambda: source.stats.outages == 1)
        assert "cannot open the port" in source.stats.last_error
    finally:
        source.close()
