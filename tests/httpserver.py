"""A real HTTP server on 127.0.0.1 for network tests: registered payloads with misbehaviours.

Each path is a :class:`Route`: a byte payload plus how to misbehave when serving
it. "Wrong content" needs no option: register bytes that do not match the
checksum the client expects. Every request is recorded (path, headers, status,
body bytes actually sent) so tests can assert what went over the wire.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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

    path: str
    headers: dict[str, str]
    status: int
    sent: int  # body bytes written


class LoopbackServer:
    """Threaded ``http.server`` on an ephemeral 127.0.0.1 port; use as a context manager."""

    def __init__(self):
        self.routes: dict[str, Route] = {}
        self.log: list[Request] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> "LoopbackServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def add(self, path: str, body: bytes = b"", **behaviour) -> str:
        """Register ``path`` (see :class:`Route` for ``behaviour``); return its URL."""
        self.routes[path] = Route(body, **behaviour)
        return self.url(path)

    def requests(self, path: str) -> list[Request]:
        """The requests made to ``path``, in order."""
        with self._lock:
            return [r for r in self.log if r.path == path]

    def _record(self, request: Request) -> None:
        with self._lock:
            self.log.append(request)


def _handler_for(server: LoopbackServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection: a truncated body ends in EOF

        def do_GET(self):
            route = server.routes.get(self.path)
            if route is None:
                return self._reply(404, b"not found")
            with server._lock:
                route.served += 1
                attempt = route.served
            if route.always_status is not None:
                return self._reply(route.always_status, b"failure", retry_after=route.retry_after)
            if attempt <= route.fail_first:
                return self._reply(route.fail_status, b"failure", retry_after=route.retry_after)
            if route.redirect_to is not None:
                return self._reply(302, b"", location=route.redirect_to)
            start = _range_start(self.headers.get("Range")) if route.ranges else None
            size = len(route.body)
            if start is not None and start >= size:
                return self._reply(416, b"", content_range=f"bytes */{size}")
            if start is not None:
                return self._reply(206, route.body[start:], content_range=f"bytes {start}-{size - 1}/{size}",
                                   truncate_at=route.truncate_at)
            return self._reply(200, route.body, truncate_at=route.truncate_at)

        def _reply(self, status, body, *, retry_after=None, location=None, content_range=None, truncate_at=None):
            sent = body[:truncate_at] if truncate_at is not None else body
            server._record(Request(self.path, dict(self.headers), status, len(sent)))  # before the client sees a byte
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (("Retry-After", retry_after), ("Location", location),
                                ("Content-Range", content_range)):
                if value is not None:
                    self.send_header(name, value)
            self.end_headers()
            self.wfile.write(sent)
            self.wfile.flush()

        def log_message(self, *args):
            pass

    return Handler


def _range_start(header: str | None) -> int | None:
    """N from ``bytes=N-`` or ``bytes=N-M``; None when absent or malformed."""
    if not header or not header.startswith("bytes="):
        return None
    first = header[len("bytes="):].split("-")[0]
    return int(first) if first.isdigit() else None
