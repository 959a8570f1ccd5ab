"""Fetching a package archive onto the box over links that drop, stall or lie.

A box is told "install X from U, sha256 S, at most N bytes" and nobody is there to retry by hand, so a
fetch has to survive a cut link, a daemon restart and a hostile server on its own:

- bytes land in `<destination>.part`; only a file whose sha256 matches is renamed to `destination`, so a
  half-written or wrong archive is never mistaken for a package;
- a part left by an earlier attempt or an earlier run is resumed with `Range`, guarded by `If-Range` with
  the validator the server gave first (kept in a sidecar beside the part together with the expected
  digest), so bytes of a file changed on the server are not spliced onto bytes of the old one;
- every connect and every read has a timeout, failures are retried with exponential backoff and jitter,
  and `stop` ends a fetch within a fraction of a second, keeping the part for the next one;
- an overall deadline bounds the whole fetch, retries and backoff included: a server that trickles a
  byte before each read times out would otherwise hold the box in one download forever;
- nothing beyond `max_bytes` is written, redirects are followed a few times and never from https to
  http, and any non-2xx answer is an error naming its status.

What happens on the wire (timeouts, redirects, credentials, which statuses are retried) is in
`http_get`; this module decides what to ask for and what the answers mean for the part on disk.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import random
import re
import threading
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit
from urllib.request import url2pathname

from edge_runtime.rollout.http_get import (
    MAX_REDIRECTS,
    DownloadDeadlineError,
    DownloadError,
    DownloadStoppedError,
    HttpGetter,
    RetryableError,
    redact,
)

__all__ = ["MAX_REDIRECTS", "DownloadDeadlineError", "DownloadError", "DownloadStoppedError", "fetch", "redact"]

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024
_MAX_BACKOFF_S = 60.0
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


@dataclass
class _Job:
    source: str
    destination: Path
    sha256: str
    max_bytes: int
    timeout_s: float
    stop: threading.Event
    progress: Callable[[int, int | None], None] | None
    deadline_s: float | None = None
    http: HttpGetter = field(init=False)

    def __post_init__(self) -> None:
        self.http = HttpGetter(self.source, timeout_s=self.timeout_s, stop=self.stop, deadline_s=self.deadline_s)

    @property
    def part(self) -> Path:
        return self.destination.with_suffix(self.destination.suffix + ".part")

    @property
    def sidecar(self) -> Path:
        return self.destination.with_suffix(self.destination.suffix + ".part.json")

    def report(self, size: int, total: int | None) -> None:
        if self.progress is not None:
            self.progress(size, total)

    def stopped(self) -> DownloadStoppedError:
        kept = self.part.stat().st_size if self.part.exists() else 0
        return DownloadStoppedError(self.source, f"stopped; {kept} bytes kept in {self.part} to resume from")

    def past_deadline(self) -> DownloadDeadlineError:
        kept = self.part.stat().st_size if self.part.exists() else 0
        return DownloadDeadlineError(
            self.source, f"not finished within its deadline of {self.deadline_s:g} s ({kept} bytes fetched)"
        )

    def refuse(self, reason: str, status: int | None = None) -> DownloadError:
        """An error no retry can cure; the part goes, since resuming it could only repeat the failure."""
        self.part.unlink(missing_ok=True)
        self.sidecar.unlink(missing_ok=True)
        return DownloadError(self.source, reason, status=status)


def fetch(
    source: str,
    destination: Path,
    *,
    sha256: str,
    max_bytes: int,
    timeout_s: float = 30,
    attempts: int = 5,
    backoff_s: float = 1.0,
    progress: Callable[[int, int | None], None] | None = None,
    stop: threading.Event | None = None,
    deadline_s: float | None = None,
) -> Path:
    """Fetch `source` (http(s) URL, file URL or local path) to `destination` once its sha256 is `sha256`.

    `timeout_s` bounds the connect and every single read; `attempts` counts requests, each resuming
    from what is on disk, with backoff `backoff_s`, doubled each time, jittered. `progress(bytes, total)`
    is called as bytes land (total None while unknown). `deadline_s` bounds an http(s) fetch as a whole,
    from this call on: connects, reads, retries and their backoff. A destination already holding the right
    bytes is kept as it is, so a command repeated after a restart costs one hash. Raises `DownloadError`
    (`DownloadStoppedError` when `stop` was set, `DownloadDeadlineError` past the deadline).
    """
    expected = sha256.lower()
    if not _SHA256.fullmatch(expected):
        raise DownloadError(source, f"sha256 must be 64 hexadecimal digits, not {sha256!r}")
    if max_bytes < 0:
        raise DownloadError(source, f"max_bytes must not be negative, not {max_bytes}")
    if attempts < 1 or timeout_s <= 0 or backoff_s < 0 or (deadline_s is not None and deadline_s <= 0):
        raise ValueError(
            "need attempts >= 1, timeout_s > 0, backoff_s >= 0, deadline_s > 0; "
            f"got {attempts}, {timeout_s}, {backoff_s}, {deadline_s}"
        )
    job = _Job(source, destination, expected, max_bytes, timeout_s, stop or threading.Event(), progress, deadline_s)
    if _digest(destination) == expected:
        return destination
    scheme = urlsplit(source).scheme
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DownloadError(source, f"cannot create {destination.parent}: {error.strerror or error}") from None
    if scheme in ("http", "https"):
        with job.http.stoppable() if stop is not None else nullcontext():
            _fetch_http(job, attempts, backoff_s)
    elif scheme == "file":
        _copy_local(job, Path(url2pathname(urlsplit(source).path)))
    elif scheme == "":
        _copy_local(job, Path(source))
    else:
        raise DownloadError(source, f"unsupported scheme {scheme!r}: use http, https, file or a local path")
    return destination


def _fetch_http(job: _Job, attempts: int, backoff_s: float) -> None:
    reason, status = "", None
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            delay = min(backoff_s * 2 ** (attempt - 2), _MAX_BACKOFF_S) * random.uniform(0.5, 1.0)
            log.warning("download of %s: %s; attempt %d in %.1f s", redact(job.source), reason, attempt, delay)
            if job.stop.wait(max(0.0, min(delay, job.http.left()))):  # no wait outlasts the deadline
                raise job.stopped()
        if job.stop.is_set():
            raise job.stopped()
        try:
            job.http.check_deadline()
            spliced = _attempt(job)
        except RetryableError as failure:
            reason, status = failure.reason, failure.status
            continue
        except DownloadStoppedError:
            raise job.stopped() from None
        except DownloadDeadlineError:
            raise job.past_deadline() from None
        actual = _digest(job.part)
        if actual == job.sha256:
            _publish(job)
            return
        reason, status = f"sha256 is {actual}, expected {job.sha256}", None
        error = job.refuse(reason)
        if not spliced:
            raise error
        # The part held bytes from before this response: fetching it whole may still give the right file.
    raise DownloadError(job.source, f"{reason} (gave up after {attempts} attempts)", status=status)


def _attempt(job: _Job) -> bool:
    """One request; True when the part now joins bytes of two responses (the digest decides if that held)."""
    offset = _resume_point(job)
    headers = {"Accept-Encoding": "identity", "User-Agent": "edge-runtime"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        validator = _read_sidecar(job).get("validator")
        if isinstance(validator, str):
            headers["If-Range"] = validator
    with job.http.get(headers) as response:
        if response.status == 416 and offset:
            return True  # the part may already be whole; the digest says whether it is
        if response.status == 206 and offset:
            total = _content_range(job, response)
            _check_size(job, total, offset + (_content_length(response) or 0))
            _receive(job, response, offset, total)
            return True
        if response.status == 200:
            total = _content_length(response)
            _check_size(job, total)
            _start_part(job, response)
            _receive(job, response, 0, total)
            return False
        raise job.refuse(f"unexpected answer {response.status} {response.reason}", response.status)


def _resume_point(job: _Job) -> int:
    """Bytes of the part worth keeping: only a part whose sidecar names this digest, within the limit."""
    try:
        size = job.part.stat().st_size
    except FileNotFoundError:
        return 0
    if size and (_read_sidecar(job).get("sha256") != job.sha256 or size > job.max_bytes):
        job.part.unlink(missing_ok=True)
        job.sidecar.unlink(missing_ok=True)
        return 0
    return size


def _start_part(job: _Job, response: http.client.HTTPResponse) -> None:
    """Empty the part, then record which file its bytes will belong to; a strong ETag or else Last-Modified."""
    etag = response.getheader("ETag")
    validator = etag if etag and not etag.startswith("W/") else response.getheader("Last-Modified")
    try:
        job.part.write_bytes(b"")
        job.sidecar.write_text(json.dumps({"sha256": job.sha256, "validator": validator}), encoding="utf-8")
    except OSError as error:
        raise DownloadError(job.source, f"cannot write {job.part}: {error.strerror or error}") from None


def _read_sidecar(job: _Job) -> dict[str, object]:
    try:
        data = json.loads(job.sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _content_length(response: http.client.HTTPResponse) -> int | None:
    value = response.getheader("Content-Length")
    return int(value) if value is not None and value.strip().isdigit() else None


def _content_range(job: _Job, response: http.client.HTTPResponse) -> int | None:
    """The total size a 206 announces; a resume at another byte than asked is dropped and fetched whole."""
    match = _CONTENT_RANGE.fullmatch((response.getheader("Content-Range") or "").strip())
    offset = job.part.stat().st_size
    if match is None or int(match[1]) != offset:
        job.part.unlink(missing_ok=True)
        raise RetryableError(
            f"server resumed with Content-Range {response.getheader('Content-Range')!r}, not at {offset}"
        )
    return None if match[3] == "*" else int(match[3])


def _check_size(job: _Job, *sizes: int | None) -> None:
    for size in sizes:
        if size is not None and size > job.max_bytes:
            raise job.refuse(f"the archive is {size} bytes, more than the limit of {job.max_bytes}")


def _receive(job: _Job, response: http.client.HTTPResponse, offset: int, total: int | None) -> None:
    """Append the body to the part, never past `max_bytes`; a short body is a retry from where it ended."""
    size = offset
    job.report(size, total)
    try:
        with job.part.open("ab") as out:
            size = _write(job, out, lambda amount: job.http.read(response, amount), size, total, "server sent")
    except OSError as error:
        raise DownloadError(job.source, f"cannot write {job.part}: {error.strerror or error}") from None
    if total is not None and size < total:
        raise RetryableError(f"connection closed after {size} of {total} bytes")


def _write(job: _Job, out: BinaryIO, read: Callable[[int], bytes], size: int, total: int | None, who: str) -> int:
    """Copy what `read` gives into `out`, which holds `size` bytes, never past `max_bytes`; the size reached."""
    while chunk := read(min(_CHUNK, job.max_bytes - size + 1)):
        if job.stop.is_set():
            raise job.stopped()
        if size + len(chunk) > job.max_bytes:
            raise job.refuse(f"{who} more than the limit of {job.max_bytes} bytes")
        out.write(chunk)
        size += len(chunk)
        job.report(size, total)
    out.flush()
    os.fsync(out.fileno())
    return size


def _copy_local(job: _Job, path: Path) -> None:
    """A local archive goes through the same part, limit and digest as a downloaded one."""
    try:
        with path.open("rb") as source, job.part.open("wb") as out:
            total = os.fstat(source.fileno()).st_size
            _check_size(job, total)
            _write(job, out, source.read, 0, total, f"{path} holds")
    except OSError as error:
        raise job.refuse(f"cannot copy {error.filename or path}: {error.strerror or error}") from None
    job.sidecar.unlink(missing_ok=True)
    actual = _digest(job.part)
    if actual != job.sha256:
        raise job.refuse(f"sha256 is {actual}, expected {job.sha256}")
    _publish(job)


def _publish(job: _Job) -> None:
    """Rename the verified part into place and make the rename survive a power cut."""
    try:
        job.part.replace(job.destination)
        job.sidecar.unlink(missing_ok=True)
        directory = os.open(job.destination.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError as error:
        raise DownloadError(job.source, f"cannot move into {job.destination}: {error.strerror or error}") from None


def _digest(path: Path) -> str | None:
    """Hex sha256 of a file, None when there is none to read."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as file:
            while chunk := file.read(1024 * 1024):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()
