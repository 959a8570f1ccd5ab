"""GET requests of one download: timeouts, a few safe redirects, credentials, and a socket `stop` can cut.

The download logic deals in parts, ranges and digests; what happens on the wire is here: which answers
mean "retry later" and which "never", where a redirect may lead, whom credentials go to, and how a read
blocked on a stalled server ends at once when the daemon wants to stop. The standard library's
`http.client` does the HTTP: the runtime has no HTTP client among its dependencies, a download makes one
request at a time to one server, and owning the connection is what lets `stop` shut its socket down from
another thread instead of waiting out the read timeout.
"""

from __future__ import annotations

import base64
import http.client
import math
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.client import HTTPConnection, HTTPSConnection
from urllib.parse import unquote, urljoin, urlsplit

from edge_runtime.errors import EdgeRuntimeError

__all__ = [
    "MAX_REDIRECTS",
    "RETRIED_STATUSES",
    "DownloadDeadlineError",
    "DownloadError",
    "DownloadStoppedError",
    "HttpGetter",
    "RetryableError",
    "redact",
]

MAX_REDIRECTS = 3
"""Hops followed per request: enough for a CDN or a mirror, too few for a loop to cost anything."""

RETRIED_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
"""Answers that say "not now" rather than "never": another attempt may succeed."""

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_SECRET_KEY = re.compile(r"sig|token|key|secret|passw|credential|auth", re.IGNORECASE)
_STOP_POLL_S = 0.05


class DownloadError(EdgeRuntimeError):
    """A package archive could not be fetched; `source` is the URL with its credentials redacted."""

    def __init__(self, source: str, reason: str, *, status: int | None = None) -> None:
        self.source = redact(source)
        self.reason = reason
        self.status = status  # the HTTP status that ended the fetch, when one did
        super().__init__(f"cannot download {self.source}: {reason}")


class DownloadStoppedError(DownloadError):
    """The fetch was asked to stop; the part stays on disk and the next fetch of it resumes there."""


class DownloadDeadlineError(DownloadError):
    """The fetch ran past its overall deadline: however steadily bytes trickled in, it ends there."""


class RetryableError(Exception):
    """A failure another attempt may not meet: a cut link, a stall, a busy server."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def redact(url: str) -> str:
    """`url` with user information and secret-looking query values (signatures, tokens) replaced by `***`.

    Error messages and logs travel off the box, and a pre-signed or credentialed URL is a key.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = "&".join(
        f"{key}=***" if _SECRET_KEY.search(unquote(key)) else f"{key}{sep}{value}"
        for key, sep, value in (pair.partition("=") for pair in parts.query.split("&") if pair)
    )
    return parts._replace(netloc=netloc, query=query).geturl()


class HttpGetter:
    """GETs of `source` with `timeout_s` on the connect and on every read, ended early by `stop`.

    `deadline_s` bounds all of them together, from the getter's creation: a per-read timeout alone lets
    a server that sends a byte now and then hold a download forever. Each connect and read waits at most
    until the deadline, and once it has passed the next one raises `DownloadDeadlineError`.

    Failures another attempt may cure raise `RetryableError`; the others `DownloadError`; a set `stop`
    `DownloadStoppedError`. Never a bare `OSError`: a network failure is a message, not a traceback.
    """

    def __init__(
        self, source: str, *, timeout_s: float, stop: threading.Event, deadline_s: float | None = None
    ) -> None:
        self.source = source
        self.timeout_s = timeout_s
        self.stop = stop
        self.deadline_s = deadline_s
        self._deadline = None if deadline_s is None else time.monotonic() + deadline_s
        self._sock: socket.socket | None = None  # of the request in flight, for `stop` to shut down

    def left(self) -> float:
        """Seconds before the overall deadline; infinite without one."""
        return math.inf if self._deadline is None else self._deadline - time.monotonic()

    def check_deadline(self) -> None:
        """Raise `DownloadDeadlineError` once the deadline has passed."""
        if self.left() <= 0:
            raise self._past_deadline()

    @contextmanager
    def get(self, headers: dict[str, str]) -> Iterator[http.client.HTTPResponse]:
        """GET following at most MAX_REDIRECTS redirects, never https → http; yields a 2xx or 416 answer."""
        url = self.source
        for _ in range(MAX_REDIRECTS + 1):
            connection, target = self._connection(url)
            try:
                try:
                    connection.connect()
                    self._sock = connection.sock
                    connection.request("GET", target, headers={**headers, **self._credentials(url)})
                    response = connection.getresponse()
                except (ValueError, http.client.InvalidURL) as error:
                    raise DownloadError(self.source, f"invalid URL {redact(url)}: {error}") from None
                except ssl.SSLCertVerificationError as error:
                    raise DownloadError(self.source, f"TLS certificate of {redact(url)} refused: {error}") from None
                except (OSError, http.client.HTTPException) as error:
                    raise self._failure(error) from None
                with response:  # a response that was not read to its end holds the socket until closed
                    if response.status in _REDIRECTS:
                        url = self._redirect(url, response.getheader("Location"))
                        continue
                    if 200 <= response.status < 300 or response.status == 416:
                        yield response
                        return
                    reason = f"server answered {response.status} {response.reason}".rstrip()
                    if response.status in RETRIED_STATUSES:
                        raise RetryableError(reason, response.status)
                    raise DownloadError(self.source, reason, status=response.status)
            finally:
                self._sock = None
                connection.close()
        raise DownloadError(self.source, f"more than {MAX_REDIRECTS} redirects")

    def read(self, response: http.client.HTTPResponse, amount: int) -> bytes:
        """Up to `amount` bytes of what has arrived; b"" at the end of the body."""
        try:
            if self._sock is not None:  # a read that waits no further than the deadline
                self._sock.settimeout(self._timeout())
            chunk = response.read1(amount)  # read() would wait to fill `amount`, and lose it all on a stall
        except (OSError, http.client.HTTPException) as error:
            raise self._failure(error) from None
        if not chunk and self.stop.is_set():
            raise DownloadStoppedError(self.source, "stopped")
        return chunk

    @contextmanager
    def stoppable(self) -> Iterator[None]:
        """While inside, setting `stop` shuts the socket in flight down, so a blocked read returns at once."""
        done = threading.Event()

        def shut_down() -> None:
            while not done.is_set():
                if self.stop.wait(_STOP_POLL_S):
                    sock = self._sock
                    if sock is not None:
                        with suppress(OSError):  # already closed: nothing left to unblock
                            sock.shutdown(socket.SHUT_RDWR)
                    done.wait(_STOP_POLL_S)

        watcher = threading.Thread(target=shut_down, name="download-stop", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            done.set()
            watcher.join()

    def _timeout(self) -> float:
        """The wait allowed to the next connect or read: `timeout_s`, or less as the deadline nears."""
        self.check_deadline()
        return min(self.timeout_s, self.left())

    def _past_deadline(self) -> DownloadDeadlineError:
        return DownloadDeadlineError(self.source, f"not finished within its deadline of {self.deadline_s:g} s")

    def _failure(self, error: BaseException) -> DownloadError | RetryableError:
        if self.stop.is_set():
            return DownloadStoppedError(self.source, "stopped")
        if isinstance(error, TimeoutError) and self.left() <= 0:
            return self._past_deadline()
        if isinstance(error, TimeoutError):
            return RetryableError(f"no data for {self.timeout_s:g} s")
        if isinstance(error, http.client.IncompleteRead):
            return RetryableError("connection closed in the middle of the body")
        return RetryableError(f"{type(error).__name__}: {error or 'closed'}")

    def _connection(self, url: str) -> tuple[HTTPConnection, str]:
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            raise DownloadError(self.source, f"invalid port in {redact(url)}") from None
        if not parts.hostname:
            raise DownloadError(self.source, f"no host in {redact(url)}")
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            if parts.scheme == "https":
                context = ssl.create_default_context()
                return HTTPSConnection(parts.hostname, port, timeout=self._timeout(), context=context), target
            return HTTPConnection(parts.hostname, port, timeout=self._timeout()), target
        except http.client.InvalidURL as error:
            raise DownloadError(self.source, f"invalid URL {redact(url)}: {error}") from None

    def _credentials(self, url: str) -> dict[str, str]:
        """Basic credentials from the source URL, sent only to the origin they were written for."""
        origin, here = urlsplit(self.source), urlsplit(url)
        if origin.username is None or (origin.scheme, origin.hostname, origin.port) != (
            here.scheme,
            here.hostname,
            here.port,
        ):
            return {}
        pair = f"{unquote(origin.username)}:{unquote(origin.password or '')}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}

    def _redirect(self, url: str, location: str | None) -> str:
        if not location:
            raise DownloadError(self.source, f"redirect from {redact(url)} without a Location")
        target = urljoin(url, location)
        scheme = urlsplit(target).scheme
        if scheme not in ("http", "https"):
            raise DownloadError(self.source, f"refusing redirect to {redact(target)}: not http or https")
        if urlsplit(url).scheme == "https" and scheme == "http":
            raise DownloadError(self.source, f"refusing redirect from https to http ({redact(target)})")
        return target
