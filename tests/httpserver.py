"""The tests' download server: registered payloads with misbehaviours, on :mod:`rankrepro.loopback`.

Each path is a :class:`Route`: a byte payload plus how to misbehave when serving it. "Wrong
content" needs no option: register bytes that do not match the checksum the client expects. Every
request is recorded (target, headers, status, body bytes actually sent) so tests can assert what
went over the wire.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from rankrepro import loopback


@dataclass
class Route:
    """How one path answers.

    body: the payload. ranges: honour ``Range: bytes=N-`` with 206 (else always 200).
    truncate_at: announce the full Content-Length but close after this many body bytes.
    fail_first: answer the first n requests with ``fail_status``.
    always_status: answer every request with this status.
    retry_after: Retry-After header value sent with failure statuses.
    redirect_to: answer 302 with this Location (a path on this server or a URL).
    """

    body: bytes = b""
    ranges: bool = True
    truncate_at: int | None = None
    fail_first: int = 0
    fail_status: int = 500
    always_status: int | None = None
    retry_after: str | None = None
    redirect_to: str | None = None
    served: int = field(default=0, init=False)


@dataclass
class Request:
    """One request as the server saw it."""

    path: str  # the request target: path and query
    headers: dict[str, str]
    status: int
    sent: int  # body bytes written


class DownloadServer(loopback.LoopbackServer):
    """A loopback server answering registered routes (by request target); use as a context manager."""

    def __init__(self):
        super().__init__(self._respond)
        self.routes: dict[str, Route] = {}
        self.log: list[Request] = []
        self._lock = threading.Lock()

    def add(self, path: str, body: bytes = b"", **behaviour) -> str:
        """Register ``path`` (see :class:`Route` for ``behaviour``); return its URL."""
        self.routes[path] = Route(body, **behaviour)
        return self.url(path)

    def requests(self, path: str) -> list[Request]:
        """The requests made to ``path``, in order."""
        with self._lock:
            return [r for r in self.log if r.path == path]

    def _respond(self, request: loopback.Request) -> loopback.Response:
        response = self._route(request)
        with self._lock:  # recorded before the client sees a byte
            self.log.append(Request(request.target, request.headers, response.status, len(response.sent)))
        return response

    def _route(self, request: loopback.Request) -> loopback.Response:
        route = self.routes.get(request.target)
        if route is None:
            return loopback.Response(404, b"not found")
        with self._lock:
            route.served += 1
            attempt = route.served
        failure = {"Retry-After": route.retry_after} if route.retry_after is not None else {}
        if route.always_status is not None:
            return loopback.Response(route.always_status, b"failure", headers=failure)
        if attempt <= route.fail_first:
            return loopback.Response(route.fail_status, b"failure", headers=failure)
        if route.redirect_to is not None:
            return loopback.Response(302, headers={"Location": route.redirect_to})
        start = _range_start(request.header("Range")) if route.ranges else None
        size = len(route.body)
        if start is not None and start >= size:
            return loopback.Response(416, headers={"Content-Range": f"bytes */{size}"})
        if start is not None:
            return loopback.Response(206, route.body[start:], truncate_at=route.truncate_at,
                                     headers={"Content-Range": f"bytes {start}-{size - 1}/{size}"})
        return loopback.Response(200, route.body, truncate_at=route.truncate_at)


def _range_start(header: str) -> int | None:
    """N from ``bytes=N-`` or ``bytes=N-M``; None when absent or malformed."""
    if not header.startswith("bytes="):
        return None
    first = header[len("bytes="):].split("-")[0]
    return int(first) if first.isdigit() else None
