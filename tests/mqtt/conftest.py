from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker import Mosquitto, Pki, make_pki

CHILD = Path(__file__).with_name("mqtt_child.py")


class Child:
    """A process from mqtt_child.py whose stdout lines are read in the background."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.last_durable = -1
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.strip())

    def wait_line(self, accept: Callable[[str], bool], timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                break
            if line.startswith("durable "):
                self.last_durable = int(line.split()[1])
            if accept(line):
                return line
        raise AssertionError(f"child {self.process.args} printed no expected line; stderr:\n{self.stderr()}")

    def read_durable(self) -> int:
        """Consume what was printed so far; the highest id the child had made durable."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return self.last_durable
            if line.startswith("durable "):
                self.last_durable = int(line.split()[1])

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(5)

    def stderr(self) -> str:
        if self.process.poll() is None:
            return "(still running)"
        assert self.process.stderr is not None
        return self.process.stderr.read()


@pytest.fixture
def spawn() -> Iterator[Callable[..., Child]]:
    children: list[Child] = []

    def start(*args: str) -> Child:
        child = Child(*args)
        children.append(child)
        return child

    yield start
    for child in children:
        child.kill()


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[Callable[..., Mosquitto]]:
    """Start brokers with the given options; request it before `connections` so they stop last."""
    started: list[Mosquitto] = []

    def start(**options: Any) -> Mosquitto:
        broker = Mosquitto(tmp_path / f"broker{len(started)}", **options).start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.close()
