"""The moving parts of the fleet test: simulated-box processes, real daemons, the consumer's tally, /proc sampling.

Both fleet tests (one Mosquitto, a RabbitMQ cluster) run the same fleet and count the same way; only the
broker, the consumer and the failure differ, so everything else lives here.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from daemon_process import DaemonProcess, face_pipeline

from edge_runtime.pipeline.results import result_schema

REPO = Path(__file__).resolve().parents[2]
FLEET_SCRIPT = Path(__file__).with_name("fleet_boxes.py")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CONNECTED = "MQTT: connected to"  # the daemon's log line at each connect


class FleetProcess:
    """One child running `fleet_boxes.py`; its stdout lines are JSON, read by a thread into a queue."""

    def __init__(
        self,
        name: str,
        count: int,
        hosts: list[str],
        work: Path,
        *,
        rate: float,
        protocol: str,
        rotate: bool,
        seed: int,
    ) -> None:
        self.name = name
        self.log_path = work / f"fleet-{name}.log"
        self.ledger_path = work / f"ledger-{name}.json"
        options = {"--name": name, "--count": count, "--hosts": ",".join(hosts), "--protocol": protocol,
                   "--rate": rate, "--spool-dir": work / f"spool-{name}", "--seed": seed,
                   "--ledger": self.ledger_path}  # fmt: skip
        command = [sys.executable, str(FLEET_SCRIPT), *(str(part) for option in options.items() for part in option)]
        if rotate:
            command.append("--rotate-hosts")
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
            )
        self._lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, name=f"fleet-{name}", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                self._lines.put(json.loads(line))

    def next_line(self, key: str, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"fleet process {self.name}: no {key!r} line in {timeout} s\n{self.log_tail()}"
            ) from None
        assert line.get(key), f"fleet process {self.name}: {line}\n{self.log_tail()}"
        return line

    def stop(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            assert self.process.stdin is not None
            self.process.stdin.write("stop\n")
            self.process.stdin.flush()

    def log_tail(self, lines: int = 20) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


@dataclass
class Fleet:
    processes: list[FleetProcess]

    @classmethod
    def start(cls, processes: int, boxes: int, hosts: list[str], work: Path, **options: Any) -> Fleet:
        return cls([FleetProcess(f"p{n}", boxes, hosts, work, seed=n, **options) for n in range(processes)])

    def wait_ready(self, timeout: float) -> list[float]:
        deadline = time.monotonic() + timeout
        return [p.next_line("ready", max(1.0, deadline - time.monotonic()))["ready_s"] for p in self.processes]

    def stop(self, timeout: float) -> list[dict[str, Any]]:
        """Stop producing; every process then empties its spools and reports what it produced."""
        for process in self.processes:
            process.stop()
        deadline = time.monotonic() + timeout
        return [p.next_line("report", max(1.0, deadline - time.monotonic()))["report"] for p in self.processes]

    def close(self) -> None:
        for process in self.processes:
            process.close()

    def ledgers(self) -> dict[str, dict[str, Any]]:
        """Every box's ledger (see `SimulatedBox.ledger`), as the processes wrote them when they stopped."""
        ledgers: dict[str, dict[str, Any]] = {}
        for process in self.processes:
            with contextlib.suppress(OSError, json.JSONDecodeError):
                ledgers |= json.loads(process.ledger_path.read_text())
        return ledgers


def explain_losses(
    lost: set[tuple[str, int]],
    ledgers: dict[str, dict[str, Any]],
    daemons: dict[str, DaemonProcess],
    outage_at: float,
    limit: int = 20,
) -> str:
    """One line per lost result (the first `limit`): did its box count an acknowledgement for it, from which
    node and when, and where the box was connected over the run; times are seconds from the outage. A real
    daemon keeps no ledger: its MQTT log lines are given instead."""
    lines = []
    for device, index in sorted(lost)[:limit]:
        ledger = ledgers.get(device)
        if ledger is None:
            said = [line for line in daemons[device].log.splitlines() if "MQTT" in line] if device in daemons else []
            lines.append(f"{device} #{index}: no ledger; its MQTT log lines:\n  " + "\n  ".join(said[-10:]))
            continue
        acked = ledger["acked_at"][index] if index < len(ledger["acked_at"]) else None
        connects = [(round(t - outage_at, 1), node) for t, node in ledger["connects"]]
        node = next((n for t, n in reversed(ledger["connects"]) if acked is not None and t <= acked), None)
        said = "never acknowledged" if acked is None else f"acknowledged by {node} at {acked - outage_at:+.2f} s"
        lines.append(f"{device} #{index}: {said}; connects (s, node): {connects}")
    if len(lost) > limit:
        lines.append(f"... and {len(lost) - limit} more")
    return "\n".join(lines)


def write_daemon_config(path: Path, device_id: str, mqtt: dict[str, Any], clip: Path) -> Path:
    """A daemon playing `clip` at its own frame rate, as a camera delivers frames, publishing at QoS 1."""
    state = path.parent / device_id
    config = {
        "device_id": device_id,
        "mqtt": mqtt,
        "state_dir": str(state / "state"),
        "cache_dir": str(state / "cache"),
        "stats": {"interval_s": 5},
        "log_level": "info",
        "pipelines": [
            face_pipeline(clip, source={"type": "file", "path": str(clip), "realtime": True}, publish={"qos": 1})
        ],
    }
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class Usage:
    """What /proc says of one process while watched: resident memory (last and peak of the samples) and the CPU
    time it used since the watch began (a broker node's boot is not the fleet's load) over the wall time."""

    pid: int
    started: float = field(default_factory=time.monotonic)
    rss_kib: int = 0
    peak_rss_kib: int = 0
    cpu_at_start: float | None = None
    cpu_s: float = 0.0
    last_seen: float = 0.0

    def sample(self) -> bool:
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        if rss == 0:  # a zombie: its memory is gone, its counters no longer move
            return False
        fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
        cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime
        if self.cpu_at_start is None:
            self.cpu_at_start = cpu
        self.rss_kib, self.peak_rss_kib = rss, max(self.peak_rss_kib, rss)
        self.cpu_s = cpu - self.cpu_at_start
        self.last_seen = time.monotonic()
        return True

    def figures(self) -> dict[str, float]:
        wall = max(1e-9, self.last_seen - self.started)
        return {
            "rss_mib": round(self.rss_kib / 1024, 1),
            "peak_rss_mib": round(self.peak_rss_kib / 1024, 1),
            "cpu_s": round(self.cpu_s, 2),
            "wall_s": round(wall, 1),
            "cpu_percent_of_one_core": round(100 * self.cpu_s / wall, 1),
        }


class Sampler:
    """Samples processes every half second in one thread, until each exits or `close`."""

    def __init__(self) -> None:
        self.usages: dict[str, Usage] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="proc-sampler", daemon=True)
        self._thread.start()

    def watch(self, name: str, pid: int) -> None:
        usage = Usage(pid)
        usage.sample()
        with self._lock:
            self.usages[name] = usage

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                for usage in self.usages.values():
                    usage.sample()

    def figures(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {name: usage.figures() for name, usage in self.usages.items()}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


class Tally:
    """The consumer's view: each (device, index) delivered, how often, and when it first arrived.

    A result's identity is its device and frame index; its `id` is checked to match on repeats, so a
    duplicate is a re-send of the same result, never two results with one index.
    """

    def __init__(self) -> None:
        self.copies: Counter[tuple[str, int]] = Counter()
        self.ids: dict[tuple[str, int], str] = {}
        self.first_arrival: list[float] = []
        self.conflicts: list[tuple[str, int]] = []
        self.samples: dict[str, dict[str, Any]] = {}  # one message per device, to validate against the schema
        self.statuses: dict[str, str] = {}
        self._lock = threading.Lock()

    def add(self, payload: bytes) -> None:
        message = json.loads(payload)
        key = (message["device_id"], message["index"])
        with self._lock:
            self.copies[key] += 1
            if self.copies[key] == 1:
                self.ids[key] = message["id"]
                self.first_arrival.append(time.monotonic())
                self.samples.setdefault(message["device_id"], message)
            elif self.ids[key] != message["id"]:
                self.conflicts.append(key)

    def add_status(self, device_id: str, status: str) -> None:
        with self._lock:
            self.statuses[device_id] = status

    def snapshot(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return dict(self.copies)

    def statuses_now(self) -> dict[str, str]:
        with self._lock:
            return dict(self.statuses)

    def wait_for(self, expected: set[tuple[str, int]], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if expected <= self.copies.keys():
                    return True
            time.sleep(0.2)
        return False

    def validate_samples(self) -> None:
        schema = result_schema()
        with self._lock:
            for message in self.samples.values():
                jsonschema.validate(message, schema, format_checker=jsonschema.FormatChecker())

    def throughput(self) -> dict[str, float]:
        """Results per second as the consumer received them: over the whole run, and its busiest second."""
        with self._lock:
            arrivals = sorted(self.first_arrival)
        if len(arrivals) < 2:
            return {"mean_per_s": 0.0, "peak_per_s": 0.0, "span_s": 0.0}
        span = arrivals[-1] - arrivals[0]
        per_second = Counter(int(t - arrivals[0]) for t in arrivals)
        return {
            "mean_per_s": round(len(arrivals) / span, 1),
            "peak_per_s": float(max(per_second.values())),
            "span_s": round(span, 1),
        }


def expected_results(reports: list[dict[str, Any]], daemons: dict[str, int]) -> set[tuple[str, int]]:
    """Every (device, index) produced: the simulated boxes count theirs, a daemon makes one per frame."""
    produced = {device: count for report in reports for device, count in report["per_box"].items()}
    produced.update(daemons)
    return {(device, index) for device, count in produced.items() for index in range(count)}


def summarize(
    label: str,
    tally: Tally,
    expected: set[tuple[str, int]],
    reports: list[dict[str, Any]],
    sampler: Sampler,
    daemons: dict[str, DaemonProcess],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The figures of one run, printed and, with EDGE_FLEET_REPORT naming a directory, written to
    `<dir>/fleet-<label>.json`, from which docs/performance.md's table is made."""
    copies = tally.snapshot()
    delivered = set(copies)
    usage = sampler.figures()
    fleet_cpu = sum(r["cpu_s"] for r in reports)
    fleet_wall = max(r["wall_s"] for r in reports)
    boxes = sum(r["boxes"] for r in reports)
    figures = {
        "broker": label,
        "boxes": boxes + len(daemons),
        "simulated_boxes": boxes,
        "fleet_processes": len(reports),
        "real_daemons": len(daemons),
        "produced": len(expected),
        "delivered": len(delivered & expected),
        "duplicated": sum(n - 1 for n in copies.values()),
        "lost": len(expected - delivered),
        "unexpected": len(delivered - expected),
        "conflicting_ids": len(tally.conflicts),
        "throughput": tally.throughput(),
        "simulated": {
            "reconnects": sum(r["reconnects"] for r in reports),
            "boxes_reconnected": sum(r["boxes_reconnected"] for r in reports),
            "broker_moves": sum(r["broker_moves"] for r in reports),
            "published_with_resends": sum(r["published"] for r in reports),
            "resent": sum(r["published"] - r["produced"] for r in reports),  # sent again: no ack before an outage
            "dropped": sum(r["dropped"] for r in reports),
            "ready_s": max(r["ready_s"] for r in reports),
            "cpu_percent_per_box": round(100 * fleet_cpu / fleet_wall / boxes, 3),
            "rss_mib_per_process": round(max(r["max_rss_kib"] for r in reports) / 1024, 1),
        },
        "daemons": {name: usage.get(name, {}) | {"connects": d.log.count(CONNECTED)} for name, d in daemons.items()},
        "brokers": {name: figures for name, figures in usage.items() if name not in daemons},
        **extra,
    }
    print(f"\nfleet figures ({label}):\n{json.dumps(figures, indent=2)}")
    directory = os.environ.get("EDGE_FLEET_REPORT")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / f"fleet-{label}.json").write_text(json.dumps(figures, indent=2) + "\n")
    return figures


def check(
    figures: dict[str, Any],
    reports: list[dict[str, Any]],
    daemons: dict[str, DaemonProcess],
    explain: Callable[[], str] = str,
) -> None:
    """The assertions both tests share, each naming the counts it compares; `explain()` adds what is known of
    the lost results to a loss's message."""
    unsettled = [(r["spool_left"], r["unsettled"][:5]) for r in reports if not r["settled"]]
    assert not unsettled, f"simulated boxes kept results in their spools (count, first boxes): {unsettled}"
    for name, daemon in daemons.items():
        assert "every result reached the broker" in daemon.log, f"{name} did not drain its spool:\n{daemon.log[-3000:]}"
        connects = figures["daemons"][name]["connects"]
        assert connects >= 2, f"{name} connected {connects} time(s): it did not live through the outage"
    if figures["lost"]:
        raise AssertionError(
            f"{figures['lost']} of {figures['produced']} results lost ({figures['delivered']} delivered, "
            f"{figures['duplicated']} duplicates)\n{explain()}"
        )
    assert figures["unexpected"] == 0, f"{figures['unexpected']} results delivered that no box reported producing"
    assert figures["conflicting_ids"] == 0, f"{figures['conflicting_ids']} (device, index) pairs with two ids"
    assert figures["simulated"]["dropped"] == 0, f"spools dropped {figures['simulated']['dropped']} results"


def connections_per_port(ports: list[int]) -> dict[int, int]:
    """Established TCP connections whose local end is each port: the broker side of its clients' connections."""
    counts = dict.fromkeys(ports, 0)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                parts = line.split()
                port = int(parts[1].rsplit(":", 1)[1], 16)
                if parts[3] == "01" and port in counts:
                    counts[port] += 1
    return counts
