"""One loopback HTTP server: a real ``http.server`` on 127.0.0.1 (ephemeral port) whose answers
come from a function.

:class:`LoopbackServer` serves GET requests: each becomes a :class:`Request` (target, path, query
parameters, headers), the server's ``answer`` function turns it into a :class:`Response`, and the
server writes that response. Callers record what they need inside ``answer``, which runs before
the client sees a byte of the answer. One request per connection (HTTP/1.0), so a response
truncated with ``truncate_at`` ends in EOF after announcing its full ``Content-Length``: a
truncated download.

Used by the H-GLDv2 fake Wikimedia APIs (:mod:`rankrepro.hgldv2.fake_api`, tests and the demo)
and by the tests' download server (``tests/httpserver.py``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qsl, urlsplit

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Request:
    """One GET request: ``target`` as sent (path and query), ``path`` without the query, ``params``
    the query's parameters (blank values kept), ``headers`` as sent."""

    target: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]

    def header(self, name: str, default: str = "") -> str:
        """The value of header ``name`` (case-insensitive, as HTTP header names are)."""
        return next((value for key, value in self.headers.items() if key.lower() == name.lower()), default)


@dataclass(frozen=True)
class Response:
    """One answer: ``status``, ``body``, ``content_type``, extra ``headers``; ``truncate_at``: send
    ``Content-Length: len(body)`` but only the body's first ``truncate_at`` bytes, then close."""

    status: int
    body: bytes = b""
    content_type: str = "application/octet-stream"
    headers: dict[str, str] = field(default_factory=dict)
    truncate_at: int | None = None

    @property
    def sent(self) -> bytes:
        """The body bytes that go over the wire."""
        return self.body if self.truncate_at is None else self.body[:self.truncate_at]


class LoopbackServer:
    """Threaded HTTP server on an ephemeral 127.0.0.1 port answering GET requests with
    ``answer(request)``; a context manager (serving inside the ``with`` block)."""

    def __init__(self, answer: Callable[[Request], Response]) -> None:
        self._httpd = ThreadingHTTPServer((HOST, 0), _handler(answer))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def url(self, target: str) -> str:
        """The URL of ``target`` (a path, with or without a query) on this server."""
        return self.base_url + target


def _handler(answer: Callable[[Request], Response]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection: a truncated body ends in EOF

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            response = answer(Request(self.path, url.path, dict(parse_qsl(url.query, keep_blank_values=True)),
                                      dict(self.headers)))
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(response.sent)
            self.wfile.flush()

        def log_message(self, *args) -> None:
            pass

    return Handler
