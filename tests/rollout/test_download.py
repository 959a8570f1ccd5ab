"""fetch() against a real HTTP server on a loopback port that can cut, stall, ignore ranges, lie and redirect."""

from __future__ import annotations

import hashlib
import http.server
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from broker import make_pki

from edge_runtime.rollout.download import (
    MAX_REDIRECTS,
    DownloadDeadlineError,
    DownloadError,
    DownloadStoppedError,
    fetch,
    redact,
)

BODY = bytes(range(256)) * 40  # 10 240 bytes, every offset distinguishable
TIMEOUT_S = 0.5


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Served:
    """What the server sends, what it was asked and sent; the lists of faults are used one per request."""

    body: bytes = BODY
    etag: str | None = '"v1"'
    ranges: bool = True
    cuts: list[int] = field(default_factory=list)  # close the connection after this many body bytes
    stalls: list[int] = field(default_factory=list)  # stop sending after this many body bytes
    statuses: list[int] = field(default_factory=list)  # answer with this status instead
    declared_length: int | None = None  # claim this Content-Length whatever the body
    omit_length: bool = False
    extra: bytes = b""  # sent after the body
    trickle_s: float | None = None  # send the body one byte at a time, this long apart
    redirects: dict[str, str] = field(default_factory=dict)  # path -> Location
    after_cut: tuple[bytes, str | None] | None = None  # body and ETag the file has once a cut happened
    requests: list[dict[str, str]] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)  # ends stalls


class Handler(http.server.BaseHTTPRequestHandler):
    server: Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        served = self.server.served
        served.requests.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        if self.path in served.redirects:
            self.send_response(302)
            self.send_header("Location", served.redirects[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if served.statuses:
            status = served.statuses.pop(0)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            served.sent.append(0)
            return
        body, start = served.body, 0
        wanted = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        if_range = self.headers.get("If-Range")
        if wanted and served.ranges and (if_range is None or if_range == served.etag):
            start = int(wanted[1])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                served.sent.append(0)
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        payload = body[start:]
        if served.etag:
            self.send_header("ETag", served.etag)
        if not served.omit_length:
            length = served.declared_length if served.declared_length is not None else len(payload)
            self.send_header("Content-Length", str(length))
        self.end_headers()
        self.send(served, payload)

    def send(self, served: Served, payload: bytes) -> None:
        cut = served.cuts.pop(0) if served.cuts else None
        stall = served.stalls.pop(0) if served.stalls else None
        sent = 0
        try:
            while served.trickle_s is not None and sent < len(payload):
                self.wfile.write(payload[sent : sent + 1])
                self.wfile.flush()
                sent += 1
                if served.release.wait(served.trickle_s):
                    return
            for limit in (cut, stall):
                if limit is not None:
                    self.wfile.write(payload[:limit])
                    self.wfile.flush()
                    sent = limit
                    if limit is cut:
                        if served.after_cut:
                            served.body, served.etag = served.after_cut
                        return
                    served.release.wait(5)
            self.wfile.write(payload[sent:] + served.extra)
            sent = len(payload) + len(served.extra)
        except OSError:
            pass  # the client went away, as some tests make it do
        finally:
            served.sent.append(sent)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    served: Served

    @property
    def url(self) -> str:
        scheme = "https" if isinstance(self.socket, ssl.SSLSocket) else "http"
        return f"{scheme}://127.0.0.1:{self.server_address[1]}"


@contextmanager
def running(server: Server) -> Iterator[Server]:
    server.served = Served()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.served.release.set()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def server() -> Iterator[Server]:
    with running(Server(("127.0.0.1", 0), Handler)) as started:
        yield started


def get(
    server: Server,
    tmp_path: Path,
    body: bytes = BODY,
    *,
    max_bytes: int = 1 << 20,
    timeout_s: float = TIMEOUT_S,
    attempts: int = 5,
    backoff_s: float = 0.01,
    progress: Callable[[int, int | None], None] | None = None,
    stop: threading.Event | None = None,
    deadline_s: float | None = None,
) -> Path:
    """fetch() of the server's /pkg.tar into tmp_path, expecting `body`, with timeouts short enough for tests."""
    return fetch(
        f"{server.url}/pkg.tar",
        tmp_path / "pkg.tar",
        sha256=sha(body),
        max_bytes=max_bytes,
        timeout_s=timeout_s,
        attempts=attempts,
        backoff_s=backoff_s,
        progress=progress,
        stop=stop,
        deadline_s=deadline_s,
    )


def part_of(tmp_path: Path) -> Path:
    return tmp_path / "pkg.tar.part"


def test_a_plain_download_lands_verified_with_progress_and_no_leftovers(server: Server, tmp_path: Path) -> None:
    seen: list[tuple[int, int | None]] = []
    path = get(server, tmp_path, progress=lambda size, total: seen.append((size, total)))
    assert path == tmp_path / "pkg.tar"
    assert path.read_bytes() == BODY
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg.tar"]
    assert seen[0] == (0, len(BODY)) and seen[-1] == (len(BODY), len(BODY))
    assert "range" not in server.served.requests[0]


def test_a_cut_download_resumes_with_range_and_fetches_only_the_rest(server: Server, tmp_path: Path) -> None:
    server.served.cuts = [3000]
    assert get(server, tmp_path, attempts=2).read_bytes() == BODY
    assert len(server.served.requests) == 2
    second = server.served.requests[1]
    assert second["range"] == "bytes=3000-"
    assert second["if-range"] == '"v1"'
    assert server.served.sent == [3000, len(BODY) - 3000]


def test_a_part_left_by_an_earlier_run_is_resumed_by_the_next(server: Server, tmp_path: Path) -> None:
    server.served.cuts = [4000]
    with pytest.raises(DownloadError, match="connection closed after 4000 of 10240 bytes"):
        get(server, tmp_path, attempts=1)
    assert part_of(tmp_path).read_bytes() == BODY[:4000]
    assert get(server, tmp_path, attempts=1).read_bytes() == BODY
    assert server.served.requests[1]["range"] == "bytes=4000-"


def test_a_server_without_range_support_restarts_from_zero(server: Server, tmp_path: Path) -> None:
    server.served.ranges = False
    server.served.cuts = [3000]
    assert get(server, tmp_path, attempts=2).read_bytes() == BODY
    assert server.served.requests[1]["range"] == "bytes=3000-"
    assert server.served.sent == [3000, len(BODY)]


def test_a_file_changed_on_the_server_is_fetched_afresh_not_spliced(server: Server, tmp_path: Path) -> None:
    changed = bytes(reversed(BODY))
    server.served.cuts = [5000]
    server.served.after_cut = (changed, '"v2"')
    assert get(server, tmp_path, changed, attempts=2).read_bytes() == changed
    assert server.served.requests[1]["range"] == "bytes=5000-"
    assert server.served.requests[1]["if-range"] == '"v1"'
    assert server.served.sent[1] == len(changed)


def test_a_spliced_part_without_validator_fails_the_digest_and_is_fetched_whole(server: Server, tmp_path: Path) -> None:
    changed = bytes(reversed(BODY))
    server.served.etag = None
    server.served.cuts = [5000]
    server.served.after_cut = (changed, None)
    assert get(server, tmp_path, changed, attempts=3).read_bytes() == changed
    assert "if-range" not in server.served.requests[1]
    assert "range" not in server.served.requests[2]
    assert server.served.sent == [5000, len(changed) - 5000, len(changed)]


def test_a_complete_part_answered_416_is_verified_and_published(server: Server, tmp_path: Path) -> None:
    server.served.stalls = [len(BODY)]  # everything arrives, then the server hangs instead of closing
    server.served.omit_length = True
    with pytest.raises(DownloadError, match="no data for"):
        get(server, tmp_path, attempts=1)
    assert part_of(tmp_path).read_bytes() == BODY
    assert get(server, tmp_path, attempts=1).read_bytes() == BODY
    assert server.served.requests[1]["range"] == f"bytes={len(BODY)}-"
    assert server.served.sent[-1] == 0  # the 416 carried no body


def test_a_stall_mid_body_times_out_and_the_retry_resumes(server: Server, tmp_path: Path) -> None:
    server.served.stalls = [2500]
    started = time.monotonic()
    assert get(server, tmp_path, attempts=2).read_bytes() == BODY
    assert time.monotonic() - started < 3
    assert server.served.requests[1]["range"] == "bytes=2500-"


def test_a_content_length_above_the_limit_is_refused_before_writing(server: Server, tmp_path: Path) -> None:
    with pytest.raises(DownloadError, match="the archive is 10240 bytes, more than the limit of 4096") as caught:
        get(server, tmp_path, max_bytes=4096)
    assert len(server.served.requests) == 1
    assert not part_of(tmp_path).exists() and not (tmp_path / "pkg.tar").exists()
    assert caught.value.source == f"{server.url}/pkg.tar"


def test_a_stream_past_the_limit_is_cut_with_nothing_beyond_it_on_disk(server: Server, tmp_path: Path) -> None:
    server.served.omit_length = True
    seen: list[int] = []
    with pytest.raises(DownloadError, match="more than the limit of 4096 bytes"):
        get(server, tmp_path, max_bytes=4096, progress=lambda size, total: seen.append(size))
    assert max(seen) <= 4096
    assert not part_of(tmp_path).exists() and not (tmp_path / "pkg.tar").exists()


def test_bytes_beyond_the_declared_length_are_not_taken(server: Server, tmp_path: Path) -> None:
    server.served.extra = b"trailing junk"
    assert get(server, tmp_path).read_bytes() == BODY


def test_a_content_length_that_lies_short_fails_the_digest(server: Server, tmp_path: Path) -> None:
    server.served.declared_length = 1000
    with pytest.raises(DownloadError, match=f"sha256 is {sha(BODY[:1000])}, expected {sha(BODY)}"):
        get(server, tmp_path)
    assert not part_of(tmp_path).exists()


def test_a_wrong_sha256_is_refused_and_the_part_deleted(server: Server, tmp_path: Path) -> None:
    with pytest.raises(DownloadError, match="sha256 is") as caught:
        fetch(f"{server.url}/pkg.tar", tmp_path / "pkg.tar", sha256=sha(b"other"), max_bytes=1 << 20)
    assert caught.value.status is None
    assert len(server.served.requests) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_404_is_refused_at_once_naming_the_status(server: Server, tmp_path: Path) -> None:
    server.served.statuses = [404]
    with pytest.raises(DownloadError, match="server answered 404 Not Found") as caught:
        get(server, tmp_path)
    assert caught.value.status == 404
    assert len(server.served.requests) == 1


def test_a_busy_server_is_retried(server: Server, tmp_path: Path) -> None:
    server.served.statuses = [503, 503]
    assert get(server, tmp_path, attempts=3).read_bytes() == BODY
    with pytest.raises(DownloadError, match=r"server answered 503 .*gave up after 2 attempts") as caught:
        server.served.statuses = [503, 503]
        get(server, tmp_path / "again", attempts=2)
    assert caught.value.status == 503


def test_redirects_are_followed_a_few_times_only(server: Server, tmp_path: Path) -> None:
    server.served.redirects = {"/pkg.tar": "/mirror/pkg.tar"}
    assert get(server, tmp_path).read_bytes() == BODY
    server.served.redirects = {"/loop": "/loop"}
    with pytest.raises(DownloadError, match=f"more than {MAX_REDIRECTS} redirects"):
        fetch(f"{server.url}/loop", tmp_path / "x.tar", sha256=sha(BODY), max_bytes=1 << 20, timeout_s=TIMEOUT_S)
    assert len(server.served.requests) == 2 + MAX_REDIRECTS + 1


def test_a_redirect_from_https_to_http_is_refused(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pki = make_pki(tmp_path / "pki")
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca_cert))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(pki.server_cert, pki.server_key)
    secure = Server(("127.0.0.1", 0), Handler)
    secure.socket = tls.wrap_socket(secure.socket, server_side=True)
    with running(secure):
        assert get(secure, tmp_path / "direct").read_bytes() == BODY  # TLS itself works
        secure.served.redirects = {"/pkg.tar": f"{server.url}/pkg.tar"}
        with pytest.raises(DownloadError, match="refusing redirect from https to http"):
            get(secure, tmp_path)
    assert server.served.requests == []


def test_credentials_are_sent_but_never_shown(server: Server, tmp_path: Path) -> None:
    server.served.statuses = [403]
    source = f"http://robot:s3cret@127.0.0.1:{server.server_address[1]}/pkg.tar?X-Amz-Signature=abc&v=2"
    with pytest.raises(DownloadError) as caught:
        fetch(source, tmp_path / "pkg.tar", sha256=sha(BODY), max_bytes=1 << 20, timeout_s=TIMEOUT_S)
    assert "s3cret" not in str(caught.value) and "abc" not in str(caught.value)
    assert "X-Amz-Signature=***&v=2" in str(caught.value)
    assert server.served.requests[0]["authorization"] == "Basic cm9ib3Q6czNjcmV0"
    assert redact("https://u:p@h/x?token=t") == "https://***@h/x?token=***"


def test_a_local_file_is_copied_under_the_same_checks(tmp_path: Path) -> None:
    archive = tmp_path / "local.tar"
    archive.write_bytes(BODY)
    assert fetch(str(archive), tmp_path / "a.tar", sha256=sha(BODY), max_bytes=len(BODY)).read_bytes() == BODY
    assert fetch(archive.as_uri(), tmp_path / "b.tar", sha256=sha(BODY), max_bytes=len(BODY)).read_bytes() == BODY
    with pytest.raises(DownloadError, match="more than the limit of 100"):
        fetch(str(archive), tmp_path / "c.tar", sha256=sha(BODY), max_bytes=100)
    with pytest.raises(DownloadError, match="sha256 is"):
        fetch(str(archive), tmp_path / "d.tar", sha256=sha(b"x"), max_bytes=len(BODY))
    with pytest.raises(DownloadError, match="10240 bytes, more than the limit of 100"):
        fetch(archive.as_uri(), tmp_path / "f.tar", sha256=sha(BODY), max_bytes=100)
    with pytest.raises(DownloadError, match="No such file"):
        fetch(str(tmp_path / "missing.tar"), tmp_path / "e.tar", sha256=sha(BODY), max_bytes=len(BODY))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar", "b.tar", "local.tar"]


def stopped_soon(server: Server, tmp_path: Path, *, timeout_s: float, backoff_s: float) -> DownloadStoppedError:
    """The error a fetch whose `stop` is set 0.2 s in ends with, once it has checked that came at once."""
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()
    with pytest.raises(DownloadStoppedError) as caught:
        get(server, tmp_path, timeout_s=timeout_s, backoff_s=backoff_s, stop=stop)
    assert time.monotonic() - started < 1.5
    return caught.value


def test_stop_aborts_a_stalled_read_at_once_and_keeps_the_part(server: Server, tmp_path: Path) -> None:
    server.served.stalls = [6000]
    assert "6000 bytes kept" in stopped_soon(server, tmp_path, timeout_s=5, backoff_s=0.01).reason
    assert part_of(tmp_path).read_bytes() == BODY[:6000]
    assert len(server.served.requests) == 1


def test_stop_during_the_backoff_ends_the_wait(server: Server, tmp_path: Path) -> None:
    server.served.statuses = [503]
    assert "0 bytes kept" in stopped_soon(server, tmp_path, timeout_s=TIMEOUT_S, backoff_s=30).reason
    assert len(server.served.requests) == 1


def test_a_destination_already_in_place_is_not_fetched_again(server: Server, tmp_path: Path) -> None:
    (tmp_path / "pkg.tar").write_bytes(BODY)
    assert get(server, tmp_path).read_bytes() == BODY
    assert server.served.requests == []


def past_deadline(server: Server, tmp_path: Path, **options: float) -> DownloadDeadlineError:
    """The error a fetch with a 1 s overall deadline ends with, once it has checked that it came in time."""
    started = time.monotonic()
    with pytest.raises(DownloadDeadlineError) as caught:
        get(server, tmp_path, deadline_s=1, **options)
    assert time.monotonic() - started < 2.5
    return caught.value


def test_a_server_trickling_a_byte_at_a_time_is_cut_at_the_overall_deadline(server: Server, tmp_path: Path) -> None:
    """Every read gets a byte well within its timeout, so only the overall deadline ends the download."""
    server.served.trickle_s = 0.05
    error = past_deadline(server, tmp_path)
    kept = part_of(tmp_path).stat().st_size
    assert 0 < kept < len(BODY)
    assert error.reason == f"not finished within its deadline of 1 s ({kept} bytes fetched)"
    assert len(server.served.requests) == 1


def test_a_stalled_read_waits_no_longer_than_the_deadline(server: Server, tmp_path: Path) -> None:
    server.served.stalls = [100]
    assert "deadline of 1 s (100 bytes fetched)" in past_deadline(server, tmp_path, timeout_s=30).reason


def test_the_backoff_between_attempts_ends_at_the_deadline(server: Server, tmp_path: Path) -> None:
    server.served.statuses = [503] * 5
    assert "deadline of 1 s (0 bytes fetched)" in past_deadline(server, tmp_path, backoff_s=30).reason
    assert len(server.served.requests) == 1
